"use strict";
// JSON with fencing tokens as decimal strings.
//
// Tokens come from a 64-bit counter and may pass 2^53 (after --min-token, say), where
// a Number would round them and two different tokens would compare equal. A BigInt
// would keep them exact, but JSON.stringify throws on one, so every object holding a
// token (a lease, an error's body) could not be logged or sent on. So the client hands
// out tokens as decimal strings, exact at any size: every integer field named `token`,
// `*_token`, `term` or `*_term` (an election's term is its leader's token) in an answer,
// outside `metadata` and `value` (which are the caller's own JSON and parsed as
// JSON.parse does). Compare tokens with BigInt(a) < BigInt(b).
//
// Node 18's JSON.parse has no access to a number's source text, so integer literals
// beyond the safe range are quoted with a marker before parsing and put back after.

const { randomUUID } = require("node:crypto");

const NUMBER = /-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?/y;
const MAX_TOKEN = 2n ** 64n - 1n;

/** An integer literal beyond the safe range, as its digits. */
class Exact {
  constructor(digits) {
    this.digits = digits;
  }
}

const isTokenKey = (key) => key === "token" || key.endsWith("_token") || key === "term" || key.endsWith("_term");
/** Fields whose contents are the caller's own JSON, not leasegate's. */
const isCallersJson = (key) => key === "metadata" || key === "value";

/** A marker no string of `text` contains: quoted integers are told apart by it. */
function markerFor(text) {
  return text.includes("leasegate-int") ? `\u0000leasegate-int-${randomUUID()}:` : "\u0000leasegate-int:";
}

/** Integer literals outside Number's safe range, outside strings, quoted with `mark`. */
function quoteLargeIntegers(text, mark) {
  let out = "";
  let copied = 0;
  for (let i = 0; i < text.length; i++) {
    const c = text[i];
    if (c === '"') {
      for (i++; i < text.length && text[i] !== '"'; i++) if (text[i] === "\\") i++;
    } else if (c === "-" || (c >= "0" && c <= "9")) {
      NUMBER.lastIndex = i;
      const literal = NUMBER.exec(text)?.[0];
      if (!literal) continue; // not a number: JSON.parse reports it
      if (/^-?\d+$/.test(literal) && !Number.isSafeInteger(Number(literal))) {
        out += text.slice(copied, i) + JSON.stringify(mark + literal);
        copied = i + literal.length;
      }
      i += literal.length - 1;
    }
  }
  return out + text.slice(copied);
}

/** Sets an own property (also one named __proto__) without any setter running. */
function put(object, key, value) {
  Object.defineProperty(object, key, { value, writable: true, enumerable: true, configurable: true });
}

/** Token fields as decimal strings, every other Exact as the Number JSON.parse would give. */
function settle(value, inMetadata) {
  if (value instanceof Exact) return Number(value.digits);
  if (Array.isArray(value)) {
    for (let i = 0; i < value.length; i++) if (value[i] instanceof Exact) value[i] = Number(value[i].digits);
    value.forEach((v) => settle(v, inMetadata));
  } else if (value !== null && typeof value === "object") {
    for (const [key, v] of Object.entries(value)) {
      const metadata = inMetadata || isCallersJson(key);
      if (!metadata && isTokenKey(key) && (v instanceof Exact || Number.isInteger(v))) {
        put(value, key, v instanceof Exact ? v.digits : String(v));
      } else if (v instanceof Exact) {
        put(value, key, Number(v.digits));
      } else {
        settle(v, metadata);
      }
    }
  }
  return value;
}

/**
 * Parses an answer of leasegate: token fields are decimal strings, exact whatever
 * their size. Throws SyntaxError like JSON.parse.
 * @param {string} text
 */
function parseAnswer(text) {
  const mark = markerFor(text);
  const value = JSON.parse(quoteLargeIntegers(text, mark), (_key, v) =>
    typeof v === "string" && v.startsWith(mark) ? new Exact(v.slice(mark.length)) : v);
  return settle(value, false);
}

/**
 * A token as methods take it (a decimal string, a bigint or a safe integer Number) as
 * a BigInt. Throws TypeError for another type, RangeError for a value that is not a
 * token (negative, beyond 2^64-1, a Number beyond 2^53 that may have been rounded).
 */
function toToken(value, what = "token") {
  let token;
  if (typeof value === "string") {
    if (!/^[0-9]{1,20}$/.test(value)) throw new RangeError(`${what}: "${value}" is not a decimal token`);
    token = BigInt(value);
  } else if (typeof value === "bigint") {
    token = value;
  } else if (typeof value === "number") {
    if (!Number.isSafeInteger(value)) {
      throw new RangeError(`${what}: ${value} is not a safe integer (pass a token beyond 2^53 as a string)`);
    }
    token = BigInt(value);
  } else {
    throw new TypeError(`${what}: expected a decimal string, a bigint or a number, got ${value === null ? "null" : typeof value}`);
  }
  if (token < 0n || token > MAX_TOKEN) throw new RangeError(`${what}: ${token} is outside 0..2^64-1`);
  return token;
}

/** JSON text of a request body; BigInt values (tokens) are written as plain numbers. */
function stringifyBody(body) {
  const mark = `\u0000leasegate-int-${randomUUID()}:`; // no string of the body can hold it
  const quoted = JSON.stringify(body, (_key, v) => (typeof v === "bigint" ? mark + v : v));
  const open = JSON.stringify(mark).slice(0, -1).replaceAll("\\", "\\\\"); // as a RegExp source
  return quoted.replace(new RegExp(`${open}(\\d+)"`, "g"), "$1");
}

module.exports = { parseAnswer, stringifyBody, toToken };
