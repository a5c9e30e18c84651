// Out-of-schema tool arguments, with the official MCP TypeScript SDK.
//
// Usage:
//   node arguments.mjs list BASE_URL KEY
//     prints "TOOLS " and the tools the key lists (tools/list, every page),
//     as JSON on one line.
//   node arguments.mjs call BASE_URL KEY CASES_FILE
//     CASES_FILE is a JSON array of {tool, what, arguments}. For each case
//     it checks the arguments against the tool's declared inputSchema with
//     the SDK's own JSON Schema validator (Ajv with formats, as the SDK
//     checks structured content), then calls the tool with the SDK's
//     client, and prints one JSON line:
//     {"what", "tool", "schema_valid", "is_error", "text", "protocol_error"}.
//
// Prints "ARGUMENTS OK" at the end; exits 1 when the SDK itself fails.

import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { AjvJsonSchemaValidator } from "@modelcontextprotocol/sdk/validation/ajv";
import { readFileSync } from "node:fs";

const [mode, base, key, casesFile] = process.argv.slice(2);

async function connect() {
  const client = new Client({ name: "arguments", version: "1.0.0" });
  const transport = new StreamableHTTPClientTransport(new URL("/mcp", base), {
    requestInit: { headers: { Authorization: `Bearer ${key}` } },
  });
  await client.connect(transport);
  return client;
}

async function listAll(client) {
  const tools = [];
  let cursor;
  do {
    const page = await client.listTools(cursor ? { cursor } : {});
    tools.push(...page.tools);
    cursor = page.nextCursor;
  } while (cursor);
  return tools;
}

async function main() {
  const client = await connect();
  const tools = await listAll(client);
  if (mode === "list") {
    console.log("TOOLS " + JSON.stringify(tools));
  } else if (mode === "call") {
    const cases = JSON.parse(readFileSync(casesFile, "utf8"));
    const validator = new AjvJsonSchemaValidator();
    const check = new Map(tools.map((t) => [t.name, validator.getValidator(t.inputSchema)]));
    for (const c of cases) {
      const out = { what: c.what, tool: c.tool };
      const v = check.get(c.tool);
      out.schema_valid = v ? v(c.arguments).valid : null;
      try {
        const r = await client.callTool({ name: c.tool, arguments: c.arguments });
        out.is_error = r.isError === true;
        out.text = r.content?.[0]?.text ?? "";
      } catch (e) {
        out.protocol_error = String(e?.message ?? e);
      }
      console.log(JSON.stringify(out));
    }
  } else {
    throw new Error(`unknown mode ${mode}`);
  }
  await client.close();
  console.log("ARGUMENTS OK");
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
