// A workflow as one durable MCP task, with the official MCP TypeScript SDK:
// submit_workflow called as a task answers at once with a working task whose
// taskId is the workflow id; a new session gets it, the steps run (completed
// over HTTP by the worker), and tasks/result returns the final step's result.
//
// Usage:
//   node workflow.mjs BASE_URL AGENT_KEY WORKER_KEY
//
// The gate must have a task type "echo" in the agent's tenant with params
// {text: string}. Prints one "ok …" line per check and "WORKFLOW OK" at the
// end; exits 1 on the first failure.

import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { CallToolResultSchema, CreateTaskResultSchema } from "@modelcontextprotocol/sdk/types.js";

const [base, agentKey, workerKey] = process.argv.slice(2);

function check(cond, what, detail) {
  if (!cond) {
    throw new Error(`FAIL ${what}${detail === undefined ? "" : ": " + JSON.stringify(detail)}`);
  }
  console.log(`ok ${what}`);
}

async function connect(key, name) {
  const client = new Client({ name, version: "1.0.0" });
  const transport = new StreamableHTTPClientTransport(new URL("/mcp", base), {
    requestInit: { headers: { Authorization: `Bearer ${key}` } },
  });
  await client.connect(transport);
  return client;
}

async function http(method, path, key, body) {
  const r = await fetch(new URL(path, base), {
    method,
    headers: { Authorization: `Bearer ${key}`, "Content-Type": "application/json" },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await r.text();
  return { status: r.status, body: text ? JSON.parse(text) : null };
}

// work leases the next echo task and completes it with its params' text.
async function work() {
  const lease = await http("POST", "/v1/leases", workerKey, { task_types: ["echo"] });
  const l = lease.body?.leases?.[0];
  if (lease.status !== 200 || !l) throw new Error(`FAIL lease: ${JSON.stringify(lease)}`);
  const done = await http("POST", `/v1/leases/${l.lease_id}/complete`, workerKey,
    { result: { echoed: l.task.params.text }, summary: "echoed " + l.task.params.text });
  if (done.status !== 200) throw new Error(`FAIL complete: ${JSON.stringify(done)}`);
}

async function main() {
  const first = await connect(agentKey, "workflow-submit");
  const { tools } = await first.listTools();
  const submit = tools.find((t) => t.name === "submit_workflow");
  check(submit?.execution?.taskSupport === "optional", "submit_workflow is a task-capable tool", submit?.execution);
  const created = await first.request({ method: "tools/call", params: { name: "submit_workflow", task: {}, arguments: {
    name: "pair", steps: [
      { name: "first", task_type: "echo", params: { text: "one" } },
      { name: "second", task_type: "echo", params: { text: "two" }, after: ["first"] },
    ] } } }, CreateTaskResultSchema);
  const id = created.task.taskId;
  check(id.startsWith("WF-") && created.task.status === "working", "a task-augmented submit_workflow answers with one working task", created);
  await first.close();

  const agent = await connect(agentKey, "workflow-resume");
  let got = await agent.experimental.tasks.getTask(id);
  check(got.status === "working" && got.statusMessage.includes("2 steps"), "a new session gets the workflow's task", got);
  await work();
  await work();
  const result = await agent.experimental.tasks.getTaskResult(id, CallToolResultSchema);
  check(!result.isError && result.structuredContent?.workflow_id === id && result.structuredContent?.status === "succeeded" &&
    result.structuredContent?.result?.content?.echoed === "two", "tasks/result returns the final step's result", result);
  got = await agent.experimental.tasks.getTask(id);
  check(got.status === "completed", "tasks/get: completed", got);
  const view = await agent.callTool({ name: "get_workflow", arguments: { workflow_id: id } });
  check(view.structuredContent?.status === "succeeded" && view.structuredContent?.steps?.length === 2, "get_workflow shows it and its steps", view);
  await agent.close();
  console.log("WORKFLOW OK");
}

main().catch((e) => {
  console.error(e?.stack ?? String(e));
  process.exit(1);
});
