// Parses mermaid texts with mermaid's own parser, headless: jsdom gives mermaid the DOM it needs (DOMPurify).
//
//   node validate.mjs FILE...          each file is one diagram, named by its path
//   node validate.mjs < texts.json     a JSON object {name: mermaid text}, when no FILE is given
//
// Exits 0 when every text parses; else prints `<name>: <mermaid's error message>` (one line each) and exits 1.
// Exits 2 on a usage error (unreadable file, bad JSON, nothing to check).
import { readFileSync } from "node:fs";
import { JSDOM } from "jsdom";

const { window } = new JSDOM("<!doctype html><html><body></body></html>", { pretendToBeVisual: true });
// Before mermaid is imported: DOMPurify binds to the global window when its module is evaluated.
globalThis.window = window;
globalThis.document = window.document;
const { default: mermaid } = await import("mermaid");

function usage(message) {
  process.stderr.write(`validate.mjs: ${message}\n`);
  process.exit(2);
}

function texts() {
  const files = process.argv.slice(2);
  if (files.length > 0) {
    return files.map((path) => {
      try {
        return [path, readFileSync(path, "utf8")];
      } catch (err) {
        return usage(`cannot read ${path}: ${err.message}`);
      }
    });
  }
  let input;
  try {
    input = JSON.parse(readFileSync(0, "utf8"));
  } catch (err) {
    return usage(`stdin is not a JSON object {name: mermaid text}: ${err.message}`);
  }
  if (input === null || typeof input !== "object" || Array.isArray(input)) {
    return usage("stdin must be a JSON object {name: mermaid text}");
  }
  return Object.entries(input).map(([name, text]) =>
    typeof text === "string" ? [name, text] : usage(`${name}: the text is not a string`),
  );
}

const todo = texts();
if (todo.length === 0) usage("nothing to check");
mermaid.initialize({ startOnLoad: false });
const failures = [];
for (const [name, text] of todo) {
  try {
    await mermaid.parse(text); // throws mermaid's own error when the text is not valid mermaid
  } catch (err) {
    const message = String(err?.message ?? err).trim().split("\n").map((l) => l.trim()).filter(Boolean).join(" | ");
    failures.push(`${name}: ${message}`);
  }
}
if (failures.length > 0) {
  process.stdout.write(failures.join("\n") + "\n");
  process.exit(1);
}
