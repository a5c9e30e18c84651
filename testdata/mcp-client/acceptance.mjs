// Acceptance test of AsyncGate's MCP door with the official MCP TypeScript SDK
// (a client nobody on this project wrote).
//
// Usage: node acceptance.mjs BASE_URL AGENT_KEY WORKER_KEY OTHER_TENANT_AGENT_KEY
//
// BASE_URL is the gate's HTTP address (http://127.0.0.1:PORT); the MCP endpoint
// is BASE_URL/mcp. The gate must have a task type "echo" in the agent's tenant.
// The worker key's principal must be a worker id in the agent's tenant; the
// last key is an agent of another tenant. Prints one "ok …" line per check and
// "ACCEPTANCE OK" at the end; exits 1 on the first failure.

import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const [base, agentKey, workerKey, otherKey] = process.argv.slice(2);
if (!base || !agentKey || !workerKey || !otherKey) {
  console.error("usage: node acceptance.mjs BASE_URL AGENT_KEY WORKER_KEY OTHER_TENANT_AGENT_KEY");
  process.exit(2);
}
const mcpURL = new URL("/mcp", base);

function check(cond, what, detail) {
  if (!cond) {
    throw new Error(`FAIL ${what}${detail === undefined ? "" : ": " + JSON.stringify(detail)}`);
  }
  console.log(`ok ${what}`);
}

async function connect(key, name) {
  const client = new Client({ name, version: "1.0.0" });
  const transport = new StreamableHTTPClientTransport(mcpURL, {
    requestInit: { headers: { Authorization: `Bearer ${key}` } },
  });
  await client.connect(transport);
  return client;
}

// call calls a tool and returns [structuredContent, result]; the text content
// must be there too.
async function call(client, name, args = {}) {
  const res = await client.callTool({ name, arguments: args });
  const text = (res.content ?? []).filter((c) => c.type === "text").map((c) => c.text).join("");
  if (!text) throw new Error(`FAIL ${name}: no text content`);
  return [res.structuredContent, res, text];
}

async function ok(client, name, args) {
  const [sc, res, text] = await call(client, name, args);
  if (res.isError) throw new Error(`FAIL ${name}(${JSON.stringify(args)}): tool error ${text}`);
  return sc;
}

async function toolError(client, name, args) {
  const [sc, res, text] = await call(client, name, args);
  if (!res.isError) throw new Error(`FAIL ${name}: expected a tool error, got ${text}`);
  // A tool error is its text, {"error": code, "detail": text}, without
  // structured content (which the SDK would check against the output schema).
  if (sc !== undefined) throw new Error(`FAIL ${name}: a tool error with structured content ${JSON.stringify(sc)}`);
  return JSON.parse(text);
}

// http calls the gate's HTTP API (the worker side of the round trip).
async function http(method, path, key, body) {
  const r = await fetch(new URL(path, base), {
    method,
    headers: { Authorization: `Bearer ${key}`, "Content-Type": "application/json" },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await r.text();
  return { status: r.status, body: text ? JSON.parse(text) : null };
}

async function main() {
  // A bad key is refused before MCP starts.
  let refused = false;
  try {
    await connect("agw_not_a_key", "bad");
  } catch (e) {
    refused = /401|unauthorized/i.test(String(e?.message ?? e)) || e?.code === 401;
  }
  check(refused, "a bad key cannot connect (401)");

  const agent = await connect(agentKey, "acceptance-agent");
  check(agent.getServerVersion()?.name === "asyncgate", "agent connected", agent.getServerVersion());
  check((agent.getInstructions() ?? "").includes("list_open_obligations"), "server instructions guide the agent");

  const { tools } = await agent.listTools();
  const names = tools.map((t) => t.name).sort();
  // The agent tools, and echo: each task type of the tenant is a tool.
  const want = ["archive_task_result", "cancel_task", "check_task_status", "echo", "fetch_task_result", "get_receipt",
    "get_receipt_chain", "get_task_progress", "list_active_tasks", "list_open_obligations", "list_task_types", "queue_task", "queue_tasks",
    // KLIS-3 resource leases, for every role.
    "acquire_resource_leases", "heartbeat_resource_leases", "release_resource_leases", "verify_resource_leases",
    "list_resource_holders", "create_resource_session", "heartbeat_resource_session", "end_resource_session",
    // Delivery (issue 13): the inbox and memory promotion.
    "list_inbox", "mark_read", "session_bootstrap", "store_task_result_in_memory",
    // Email (seed 002).
    "archive_task_email", "fetch_task_email", "send_email",
    // Workflows (issue 39).
    "submit_workflow", "get_workflow", "list_workflows", "cancel_workflow",
    // Schedules (issue 39).
    "create_schedule", "list_schedules", "get_schedule", "update_schedule", "pause_schedule", "resume_schedule", "delete_schedule"].sort();
  check(JSON.stringify(names) === JSON.stringify(want), "agent lists exactly the agent tools", names);
  check(tools.every((t) => t.description && t.inputSchema?.type === "object" && t.outputSchema?.type === "object"),
    "every tool has a description, an input schema and an output schema");

  // Queue a task: rich acknowledgement.
  const ack = await ok(agent, "queue_task", { task_type: "echo", params: { text: "hello" }, task_summary: "say hello" });
  check(ack.task_id?.startsWith("T-") && ack.status === "queued" && ack.is_duplicate === false &&
    ack.poll_suggestion_seconds > 0 && ack.inbox_on_complete === true && ack.receipt_id?.startsWith("R-"),
    "queue_task returns the rich acknowledgement", ack);

  const status = await ok(agent, "check_task_status", { task_id: ack.task_id });
  check(status.status === "queued" && status.next_step, "check_task_status: queued, with next_step", status);

  let obs = await ok(agent, "list_open_obligations", {});
  check(obs.open_obligations.some((o) => o.receipt_id === ack.receipt_id && o.task_id === ack.task_id) && obs.owed_to_you >= 1,
    "list_open_obligations shows the task.assigned obligation owed to the agent", obs);

  // A worker completes it over the HTTP API.
  const lease = await http("POST", "/v1/leases", workerKey, { task_types: ["echo"] });
  check(lease.status === 200 && lease.body.leases[0].task.task_id === ack.task_id, "worker leased the task over HTTP", lease);
  const leaseID = lease.body.leases[0].lease_id;
  const done = await http("POST", `/v1/leases/${leaseID}/complete`, workerKey, {
    summary: "said hello",
    artifacts: [{ type: "s3", url: "s3://bucket/hello.json" }],
    metadata: { words: 1 },
  });
  check(done.status === 200 && done.body.status === "completed", "worker completed the task over HTTP", done);

  const after = await ok(agent, "check_task_status", { task_id: ack.task_id });
  check(after.status === "succeeded" && after.has_result === true, "check_task_status: succeeded", after);
  const result = await ok(agent, "fetch_task_result", { task_id: ack.task_id });
  check(result.task_id === ack.task_id && result.summary === "said hello" &&
    result.artifacts?.[0]?.url === "s3://bucket/hello.json" && result.metadata?.words === 1,
    "fetch_task_result returns the result", result);
  const archived = await ok(agent, "archive_task_result", { task_id: ack.task_id });
  check(archived.status === "archived" && archived.archived_at, "archive_task_result", archived);

  const receipt = await ok(agent, "get_receipt", { receipt_id: ack.receipt_id });
  check(receipt.receipt_type === "task.assigned" && receipt.terminated_by === done.body.receipt_id,
    "get_receipt: the assignment was discharged by the completion", receipt);
  const chain = await ok(agent, "get_receipt_chain", { receipt_id: done.body.receipt_id });
  check(chain.chain[0].receipt_type === "task.completed" && chain.chain.some((l) => l.receipt_id === ack.receipt_id),
    "get_receipt_chain walks from the completion to the assignment", chain);

  // Cancel another task.
  const second = await ok(agent, "queue_task", { task_type: "echo", params: {} });
  const canceled = await ok(agent, "cancel_task", { task_id: second.task_id, reason: "changed my mind" });
  check(canceled.status === "canceled", "cancel_task cancels a queued task", canceled);

  obs = await ok(agent, "list_open_obligations", {});
  check(!obs.open_obligations.some((o) => o.task_id === ack.task_id || o.task_id === second.task_id),
    "completed and canceled tasks leave no open obligation", obs);
  const active = await ok(agent, "list_active_tasks", {});
  check(!active.tasks.some((t) => t.task_id === ack.task_id || t.task_id === second.task_id), "list_active_tasks", active);

  // A third task goes through the MCP worker shim.
  const third = await ok(agent, "queue_task", { task_type: "echo", params: { text: "shim" } });
  const worker = await connect(workerKey, "acceptance-worker");
  const wnames = (await worker.listTools()).tools.map((t) => t.name);
  check(wnames.includes("worker_lease_task") && !wnames.includes("queue_task"), "a worker key sees the worker shim", wnames);
  check(!names.some((n) => n.startsWith("worker_")), "an agent key does not see the worker shim");
  const env = await ok(worker, "worker_lease_task", { task_types: ["echo"], wait_seconds: 1 });
  check(env.task_id === third.task_id && env.run_id, "worker_lease_task", env);
  const hb = await ok(worker, "worker_heartbeat_task", { task_id: env.task_id, run_id: env.run_id, progress_percent: 50, progress_message: "half" });
  check(hb.status === "ok" && hb.cancel_requested === false, "worker_heartbeat_task", hb);
  const prog = await ok(agent, "get_task_progress", { task_id: third.task_id });
  check(prog.progress_percent === 50 && prog.progress.length === 1, "get_task_progress", prog);
  const wdone = await ok(worker, "worker_complete_task", { task_id: env.task_id, run_id: env.run_id,
    result_channel: "s3", result_pointer: "s3://bucket/shim.json", summary: "shim done" });
  check(wdone.status === "completed", "worker_complete_task", wdone);
  const late = await toolError(worker, "worker_fail_task", { task_id: env.task_id, run_id: env.run_id, error_message: "late" });
  check(late.error === "lease_expired", "worker_fail_task on a finished run: lease_expired", late);
  await worker.close();

  // Another tenant sees none of it.
  const other = await connect(otherKey, "acceptance-other");
  const nf = await toolError(other, "check_task_status", { task_id: ack.task_id });
  check(nf.error === "not_found", "another tenant gets not_found for the task", nf);
  const nf2 = await toolError(other, "fetch_task_result", { task_id: ack.task_id });
  check(nf2.error === "not_found", "another tenant cannot fetch the result", nf2);
  const nf3 = await toolError(other, "cancel_task", { task_id: third.task_id });
  check(nf3.error === "not_found", "another tenant cannot cancel", nf3);
  const otherList = await ok(other, "list_active_tasks", { status: ["queued", "leased", "succeeded", "canceled"] });
  check(otherList.tasks.length === 0, "another tenant lists no tasks", otherList);
  const otherObs = await ok(other, "list_open_obligations", {});
  check(otherObs.open_obligations.length === 0, "another tenant has no obligations", otherObs);

  // Errors carry the HTTP API's codes.
  const unk = await toolError(agent, "queue_task", { task_type: "no_such_type" });
  check(unk.error === "unknown_task_type" && unk.detail, "unknown task type: unknown_task_type", unk);
  const conflict = await toolError(agent, "cancel_task", { task_id: ack.task_id });
  check(conflict.error === "conflict", "canceling a finished task: conflict", conflict);

  await other.close();
  await agent.close();
  console.log("ACCEPTANCE OK");
}

main().catch((e) => {
  console.error(e?.stack ?? String(e));
  process.exit(1);
});
