// Durable MCP Tasks with the official MCP TypeScript SDK (its experimental
// tasks API): a task queued through a task-type tool survives the client's
// disconnect and a gate restart.
//
// Usage:
//   node tasks.mjs queue  BASE_URL AGENT_KEY
//       queues an "echo" task as an MCP task, prints "TASK <id>", disconnects
//   node tasks.mjs resume BASE_URL AGENT_KEY WORKER_KEY TASK_ID
//       a new session (after the gate restarted): lists and gets the task,
//       subscribes to it, completes it over HTTP as the worker, sees the
//       notifications, fetches the result with tasks/result; then runs a
//       second task through callToolStream and cancels a third
//
// The gate must have a task type "echo" in the agent's tenant with
// poll_suggestion_seconds 1 and params {text: string}. Prints one "ok …" line
// per check and "TASKS OK" at the end; exits 1 on the first failure.

import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import {
  CallToolResultSchema,
  CreateTaskResultSchema,
  ResourceUpdatedNotificationSchema,
  TaskStatusNotificationSchema,
} from "@modelcontextprotocol/sdk/types.js";

const [phase, base, agentKey, workerKey, taskId] = process.argv.slice(2);

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

// work leases the next echo task as the worker and completes it with result.
async function work(id, result) {
  const lease = await http("POST", "/v1/leases", workerKey, { task_types: ["echo"] });
  if (lease.status !== 200 || lease.body.leases?.[0]?.task?.task_id !== id) {
    throw new Error(`FAIL lease ${id}: ${JSON.stringify(lease)}`);
  }
  const done = await http("POST", `/v1/leases/${lease.body.leases[0].lease_id}/complete`, workerKey, { result, summary: "echoed" });
  if (done.status !== 200) throw new Error(`FAIL complete ${id}: ${JSON.stringify(done)}`);
}

async function until(what, cond) {
  const deadline = Date.now() + 20000;
  while (!cond()) {
    if (Date.now() > deadline) throw new Error(`FAIL ${what}: not within 20 s`);
    await new Promise((r) => setTimeout(r, 20));
  }
  console.log(`ok ${what}`);
}

async function queue() {
  const agent = await connect(agentKey, "tasks-queue");
  check(agent.getServerCapabilities()?.tasks?.requests?.tools?.call !== undefined, "the gate advertises task-augmented tools/call");
  const { tools } = await agent.listTools();
  const echo = tools.find((t) => t.name === "echo");
  check(echo?.execution?.taskSupport === "optional" && echo.inputSchema?.properties?.text?.type === "string" &&
    echo.outputSchema?.type === "object", "the task type echo is a task-capable tool with its params schema", echo);
  check(tools.every((t) => t.outputSchema?.type === "object"), "every tool has an output schema");
  const types = await agent.callTool({ name: "list_task_types", arguments: {} });
  check(types.structuredContent.task_types.some((t) => t.task_type === "echo" && t.resource_uri === "asyncgate://task-types/echo"),
    "list_task_types describes echo", types.structuredContent);
  const created = await agent.request({ method: "tools/call", params: { name: "echo", arguments: { text: "durable" }, task: {} } },
    CreateTaskResultSchema);
  check(created.task.taskId.startsWith("T-") && created.task.status === "working" && created.task.pollInterval === 1000,
    "a task-augmented call answers at once with a working task", created);
  await agent.close();
  console.log(`TASK ${created.task.taskId}`);
}

async function resume() {
  const agent = await connect(agentKey, "tasks-resume");
  const seen = { status: [], updated: [] };
  agent.setNotificationHandler(TaskStatusNotificationSchema, (n) => seen.status.push(n.params));
  agent.setNotificationHandler(ResourceUpdatedNotificationSchema, (n) => seen.updated.push(n.params.uri));

  const list = await agent.experimental.tasks.listTasks();
  check(list.tasks.some((t) => t.taskId === taskId && t.status === "working"), "a new session after the restart lists the task", list);
  const got = await agent.experimental.tasks.getTask(taskId);
  check(got.status === "working" && got.statusMessage === "queued", "tasks/get: working (queued)", got);
  const uri = `asyncgate://tasks/${taskId}`;
  await agent.subscribeResource({ uri });
  const res = await agent.readResource({ uri });
  check(JSON.parse(res.contents[0].text).status === "queued", "the task resource reads as check_task_status", res);

  await work(taskId, { echoed: "durable" });
  await until("a status notification says completed", () => seen.status.some((s) => s.taskId === taskId && s.status === "completed"));
  await until("the subscription sees the update", () => seen.updated.includes(uri));
  const result = await agent.experimental.tasks.getTaskResult(taskId, CallToolResultSchema);
  check(!result.isError && result.structuredContent?.result?.content?.echoed === "durable" &&
    result.content?.[0]?.text?.includes("echoed") && !result.content[0].text.includes("{"),
    "tasks/result returns the result fetched through its channel, with a short summary", result);

  // The SDK's own task flow: callToolStream polls tasks/get, then tasks/result
  // (it calls a tool as a task when tools/list marked it task-capable).
  await agent.listTools();
  const kinds = [];
  let final;
  for await (const msg of agent.experimental.tasks.callToolStream({ name: "echo", arguments: { text: "stream" } })) {
    kinds.push(msg.type);
    if (msg.type === "taskCreated") await work(msg.task.taskId, { echoed: "stream" });
    if (msg.type === "result") final = msg.result;
    if (msg.type === "error") throw msg.error;
  }
  check(kinds[0] === "taskCreated" && final?.structuredContent?.result?.content?.echoed === "stream",
    "callToolStream: taskCreated, then the result", { kinds, final });

  const third = await agent.request({ method: "tools/call", params: { name: "echo", arguments: { text: "no" }, task: {} } },
    CreateTaskResultSchema);
  const canceled = await agent.experimental.tasks.cancelTask(third.task.taskId);
  check(canceled.status === "cancelled", "tasks/cancel cancels a queued task", canceled);
  let refused = false;
  try {
    await agent.experimental.tasks.cancelTask(taskId);
  } catch (e) {
    refused = e.code === -32602;
  }
  check(refused, "tasks/cancel of a completed task: -32602");
  await agent.close();
  console.log("TASKS OK");
}

(phase === "queue" ? queue() : resume()).catch((e) => {
  console.error(e?.stack ?? String(e));
  process.exit(1);
});
