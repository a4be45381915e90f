// Preloaded into a Node test server (node -r) with CALL_LOG set: every JSON-RPC tools/call the
// server receives over HTTP is appended to that file as one JSON line (name and arguments),
// so a test counts the calls that reached the server, whatever the server does with them.
const fs = require("node:fs");
const http = require("node:http");
const file = process.env.CALL_LOG;
const emit = http.Server.prototype.emit;

function record(raw) {
  let body;
  try {
    body = JSON.parse(raw.toString("utf8"));
  } catch {
    return;
  }
  for (const msg of Array.isArray(body) ? body : [body]) {
    if (msg && msg.method === "tools/call") {
      const p = msg.params || {};
      fs.appendFileSync(file, JSON.stringify({ name: p.name, arguments: p.arguments }) + "\n");
    }
  }
}

http.Server.prototype.emit = function (event, req, ...rest) {
  if (file && event === "request" && req.method === "POST") {
    const chunks = [];
    const own = req.emit;
    req.emit = function (what, chunk, ...more) {  // a tap: the body's readers are untouched
      if (what === "data") chunks.push(Buffer.from(chunk));
      if (what === "end") record(Buffer.concat(chunks));
      return own.call(this, what, chunk, ...more);
    };
  }
  return emit.call(this, event, req, ...rest);
};
