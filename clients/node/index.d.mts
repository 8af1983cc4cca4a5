// Types of the leasegate client for ES modules: those of the CommonJS entry (index.d.ts).
export * from "./index.js";
