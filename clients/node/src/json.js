// JSON with fencing tokens as BigInt. Tokens come from a 64-bit counter and may pass
// 2^53 (after --min-token, say), where JSON.parse would round them: two different
// tokens would compare equal. Node 18's JSON.parse has no access to a number's
// source text, so integers beyond the safe range are quoted with a marker before
// parsing and turned into BigInt after; token fields are then BigInt whatever their size.

const MARK = "\u0000leasegate-int:";
const MARKED = /"\\u0000leasegate-int:(-?\d+)"/g; // MARK + digits as JSON.stringify writes it
const NUMBER = /-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?/y;
const TOKEN_KEYS = new Set(["token", "last_token", "max_token", "holder_token"]);

/** Integer literals outside Number's safe range, outside strings, quoted with MARK. */
function quoteLargeIntegers(text) {
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
        out += text.slice(copied, i) + JSON.stringify(MARK + literal);
        copied = i + literal.length;
      }
      i += literal.length - 1;
    }
  }
  return out + text.slice(copied);
}

/** Token fields (outside metadata, which is the caller's own) as BigInt. */
function tokensAsBigInt(value) {
  if (Array.isArray(value)) {
    value.forEach(tokensAsBigInt);
  } else if (value !== null && typeof value === "object") {
    for (const [key, v] of Object.entries(value)) {
      if (key === "metadata") continue;
      if (TOKEN_KEYS.has(key) && typeof v === "number") value[key] = BigInt(v);
      else tokensAsBigInt(v);
    }
  }
  return value;
}

/**
 * Parses an answer of leasegate: tokens are BigInt, and so is any other integer
 * beyond 2^53 (kept exact instead of rounded). Throws SyntaxError like JSON.parse.
 * @param {string} text
 */
export function parseAnswer(text) {
  const value = JSON.parse(quoteLargeIntegers(text), (_key, v) =>
    typeof v === "string" && v.startsWith(MARK) ? BigInt(v.slice(MARK.length)) : v);
  return tokensAsBigInt(value);
}

/** JSON text of a request body; BigInt values (tokens) are written as plain numbers. */
export function stringifyBody(body) {
  return JSON.stringify(body, (_key, v) => (typeof v === "bigint" ? MARK + v : v)).replace(MARKED, "$1");
}
