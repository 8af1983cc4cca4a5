"""cutfs itself: what survives its power cut is exactly what was synced.

Each test mounts cutfs on a fresh disk, changes files through the mount, cuts the power
(or lets --cut-at cut it), and reads DISK/root, the disk, directly: written but not
fsynced data is gone, fsynced data is there; a name created, removed or renamed is taken
back unless its directory was fsynced; reads through the mount see every write. Skipped
(77) without cutfs, /dev/fuse or root, saying which.
"""

import errno
import os
import shutil
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import cutfs_mount  # noqa: E402
from cutfs_mount import CutFs  # noqa: E402


def fsync_dir(path):
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write(path, data, sync=False, mode="wb"):
    with open(path, mode) as f:
        f.write(data)
        f.flush()
        if sync:
            os.fsync(f.fileno())


def read(path):
    with open(path, "rb") as f:
        return f.read()


class CutFsTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="cutfs-test-")
        self.disk = os.path.join(self.dir, "disk")
        self.mnt = os.path.join(self.dir, "mnt")
        self.fs = CutFs(self.disk, self.mnt)
        self.addCleanup(self._cleanup)

    def _cleanup(self):
        if self.fs.running():
            self.fs.stop()
        shutil.rmtree(self.dir, ignore_errors=True)

    def m(self, name):
        return os.path.join(self.mnt, name)

    def d(self, name):
        return os.path.join(self.disk, "root", name)

    def durable_file(self, name, data):
        """A file whose content and name are both synced."""
        write(self.m(name), data, sync=True)
        fsync_dir(self.mnt)

    def remount(self, **kw):
        self.fs = CutFs(self.disk, self.mnt, **kw)

    def test_unsynced_data_is_lost_synced_data_kept(self):
        self.durable_file("a", b"synced")
        write(self.m("a"), b" and not", mode="ab")
        self.assertEqual(read(self.m("a")), b"synced and not")
        self.assertEqual(os.path.getsize(self.m("a")), 14)
        self.assertEqual(read(self.d("a")), b"synced", "written to the disk before any sync")
        line = self.fs.cut()
        self.assertIn("power cut", line)
        self.assertIn("dropped 1 unsynced pages of 1 files", line)
        self.assertEqual(read(self.d("a")), b"synced")

    def test_fdatasync_makes_data_durable(self):
        self.durable_file("a", b"x" * 10000)
        fd = os.open(self.m("a"), os.O_WRONLY)
        os.pwrite(fd, b"y" * 5000, 8000)
        os.fdatasync(fd)
        os.pwrite(fd, b"z", 0)
        os.close(fd)
        self.fs.cut()
        self.assertEqual(read(self.d("a")), b"x" * 8000 + b"y" * 5000)

    def test_reads_overlay_writes_on_the_disk(self):
        self.durable_file("a", bytes(range(256)) * 40)  # 10240 bytes, 3 pages
        fd = os.open(self.m("a"), os.O_RDWR)
        os.pwrite(fd, b"ABC", 4095)  # across a page boundary
        os.pwrite(fd, b"end", 20000)  # a hole between
        self.assertEqual(os.pread(fd, 10, 4092), bytes([252, 253, 254]) + b"ABC" + bytes([2, 3, 4, 5]))
        self.assertEqual(os.pread(fd, 100, 10230), bytes(range(246, 256)) + bytes(90))
        self.assertEqual(os.fstat(fd).st_size, 20003)
        # Shorter then longer again: what was cut off reads as zeros, before and after a sync.
        os.ftruncate(fd, 5000)
        os.ftruncate(fd, 9000)
        expect = bytearray((bytes(range(256)) * 40)[:5000])
        expect[4095:4098] = b"ABC"
        expect = bytes(expect) + bytes(4000)
        self.assertEqual(os.pread(fd, 10000, 0), expect)
        os.fsync(fd)
        os.close(fd)
        self.assertEqual(read(self.m("a")), expect)
        self.fs.cut()
        self.assertEqual(read(self.d("a")), expect)

    def test_torn_keeps_a_part_of_what_was_not_synced(self):
        self.fs.stop()
        self.remount(torn=12345)
        old, new = b"o" * 32768, b"n" * 32768
        self.durable_file("a", old)
        fd = os.open(self.m("a"), os.O_WRONLY)
        os.pwrite(fd, new[:20000], 1000)  # not synced: bytes 1000..20999, pages 0..5
        os.close(fd)
        line = self.fs.cut()
        self.assertRegex(line, r"dropped 6 unsynced pages of 1 files \(\d+ sectors of them written\)")
        disk = read(self.d("a"))
        self.assertEqual(len(disk), 32768)
        self.assertEqual(disk[:1000], old[:1000], "bytes nobody wrote")
        self.assertEqual(disk[21000:], old[21000:], "bytes nobody wrote")
        sectors = [disk[i:i + 512] for i in range(0, 21504, 512)]
        for i, sec in enumerate(sectors):
            lo, hi = max(i * 512, 1000), min(i * 512 + 512, 21000)
            self.assertIn(disk[lo:hi], (old[lo:hi], new[lo:hi]), "sector %d is one or the other" % i)
        kept = sum(1 for i in range(2, 41) if disk[i * 512] == ord("n"))
        self.assertTrue(0 < kept < 39, "a part of the sectors, not none or all: %d" % kept)

    def test_unsynced_truncate_is_lost(self):
        self.durable_file("a", b"0123456789")
        os.truncate(self.m("a"), 3)
        self.assertEqual(read(self.m("a")), b"012")
        self.fs.cut()
        self.assertEqual(read(self.d("a")), b"0123456789")

    def test_a_new_name_needs_its_directory_synced(self):
        write(self.m("synced-file-only"), b"data", sync=True)
        os.mkdir(self.m("sub"))
        write(self.m("sub/x"), b"x", sync=True)
        self.assertEqual(sorted(os.listdir(self.mnt)), ["sub", "synced-file-only"])
        self.fs.cut()
        self.assertEqual(os.listdir(os.path.join(self.disk, "root")), [])
        self.remount()
        write(self.m("b"), b"kept", sync=True)
        fsync_dir(self.mnt)
        self.fs.cut()
        self.assertEqual(read(self.d("b")), b"kept")

    def test_unlink_and_rename_are_taken_back_until_the_directory_is_synced(self):
        self.durable_file("old", b"old content")
        self.durable_file("victim", b"replaced")
        self.durable_file("gone", b"removed")
        write(self.m("new"), b"new content", sync=True)
        os.rename(self.m("new"), self.m("victim"))  # replaces a durable file
        os.rename(self.m("old"), self.m("moved"))
        os.unlink(self.m("gone"))
        self.assertEqual(sorted(os.listdir(self.mnt)), ["moved", "victim"])
        self.assertEqual(read(self.m("victim")), b"new content")
        line = self.fs.cut()
        self.assertIn("took back 5 names", line)
        self.assertEqual(sorted(os.listdir(os.path.join(self.disk, "root"))), ["gone", "old", "victim"])
        self.assertEqual(read(self.d("victim")), b"replaced")
        self.assertEqual(read(self.d("gone")), b"removed")
        self.remount()
        os.unlink(self.m("gone"))
        os.rename(self.m("old"), self.m("moved"))
        fsync_dir(self.mnt)
        self.fs.cut()
        self.assertEqual(sorted(os.listdir(os.path.join(self.disk, "root"))), ["moved", "victim"])
        self.assertEqual(os.listdir(os.path.join(self.disk, "trash")), [], "a durable removal is deleted")

    def test_directories(self):
        os.mkdir(self.m("d"))
        fsync_dir(self.mnt)
        os.rmdir(self.m("d"))
        os.mkdir(self.m("e"))
        self.fs.cut()
        self.assertEqual(os.listdir(os.path.join(self.disk, "root")), ["d"])

    def test_an_open_removed_file_still_works(self):
        fd = os.open(self.m("tmp"), os.O_RDWR | os.O_CREAT, 0o600)
        os.write(fd, b"abc")
        os.unlink(self.m("tmp"))
        os.pwrite(fd, b"def", 3)
        self.assertEqual(os.pread(fd, 10, 0), b"abcdef")
        self.assertEqual(os.fstat(fd).st_size, 6)
        os.fsync(fd)
        os.close(fd)
        self.assertEqual(os.listdir(self.mnt), [])
        self.fs.cut()
        self.assertEqual(os.listdir(os.path.join(self.disk, "root")), [], "neither the name nor a hidden one")

    def test_cut_at_the_nth_matching_operation(self):
        self.fs.stop()
        self.remount(cut_at=3, cut_only="*.db")
        write(self.m("other"), b"not counted", sync=True)
        fd = os.open(self.m("x.db"), os.O_RDWR | os.O_CREAT, 0o600)  # 1 (create)
        os.write(fd, b"one")  # 2
        with self.assertRaises(OSError) as e:
            os.write(fd, b"two")  # 3: the power goes instead
        self.assertEqual(e.exception.errno, errno.EIO)
        os.close(fd)
        self.assertTrue(self.fs.wait_cut(10))
        self.assertIn("power cut after", self.fs.result)
        self.assertIn("(3 matching", self.fs.result)
        self.assertEqual(os.listdir(os.path.join(self.disk, "root")), [])

    def test_ops_are_counted(self):
        before, _ = self.fs.ops()
        write(self.m("a"), b"1", sync=True)  # create, write, fsync
        after, matching = self.fs.ops()
        self.assertEqual(after - before, 3)
        self.assertEqual(matching, after)

    def test_a_clean_unmount_syncs_everything(self):
        write(self.m("a"), b"unsynced")
        line = self.fs.stop()
        self.assertIn("unmounted cleanly", line)
        self.assertEqual(read(self.d("a")), b"unsynced")


if __name__ == "__main__":
    cutfs_mount.skip_unless_available()
    unittest.main()
