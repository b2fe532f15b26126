// Parses an AsyncAPI document with the official parser (@asyncapi/parser, which validates
// against the AsyncAPI JSON Schema and runs its spectral rules) and prints JSON:
// {"ok", "errors": [...], "warnings": [...], "channels": {address: {operations}}}.
// Exit 1 on any error-severity diagnostic. Usage: node validate.mjs ../asyncapi.yaml
import { readFileSync } from "node:fs";
import { Parser } from "@asyncapi/parser";

const path = process.argv[2] ?? "../asyncapi.yaml";
const parser = new Parser();
const { document, diagnostics } = await parser.parse(readFileSync(path, "utf8"));
const describe = (d) => ({ code: d.code, message: d.message, path: d.path.join("/") });
const errors = diagnostics.filter((d) => d.severity === 0).map(describe);
const warnings = diagnostics.filter((d) => d.severity === 1).map(describe);
const channels = {};
const security = {};
if (document) {
  for (const channel of document.allChannels()) {
    channels[channel.address() ?? `(${channel.id()})`] = {
      id: channel.id(),
      parameters: channel.parameters().all().map((p) => p.id()),
      messages: channel.messages().all().map((m) => m.id()),
    };
  }
  for (const scheme of document.components().securitySchemes().all()) {
    security[scheme.id()] = scheme.type();
  }
}
console.log(JSON.stringify({ ok: errors.length === 0 && !!document, errors, warnings,
                             channels, security }, null, 1));
process.exit(errors.length === 0 && document ? 0 : 1);
