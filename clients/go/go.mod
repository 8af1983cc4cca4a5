module leasegate

go 1.19
