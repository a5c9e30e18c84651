// Package ai is the AI worker of the seeds ("openrouter-001", "Lease to
// Receipt flow"): a worker built on the Go worker SDK that answers tasks by
// running a chat-completion loop against any OpenAI-compatible endpoint
// (OpenAI, OpenRouter, a llama.cpp or vLLM server) through the official
// openai-go client, and executes the model's tool calls on MCP servers
// (stdio or streamable HTTP, the gate's own /mcp among them) as an mcp-go
// client.
//
// For each task the Runner leases (it accepts, heartbeats for the whole run,
// and delivers the outcome with retries and its spool):
//
//   - the task type's instruction profile gives the system prompt, the
//     allowlist of MCP tools ("server/tool", globs allowed) and the limits;
//     profiles are JSON files validated against
//     schemas/ai-profile.schema.json (LoadProfiles);
//   - the job reports RUNNING at once; before every step the loop checks
//     cancellation (a canceled task, a lost lease or a shutdown stops it at
//     once) and reports progress "RUNNING, step n of max";
//   - the model's tool calls run on their servers, at most max_tool_calls per
//     task; unknown tools, tool errors and calls over the budget are answered
//     to the model as tool results, never raised (a server that forgot the
//     session, after a restart, gets a new one);
//   - a message without tool calls is the final answer, completed as the
//     inline result (the gate stores it through the task type's result
//     channel, the file channel when too large) with the usage (tokens,
//     steps, tool calls) in the completion's metadata;
//   - failures are classified: timeouts, 429s, 5xx and unreadable answers are
//     retried within the provider's budget, then fail the task retryable; a
//     request the provider refuses (400, 404, 422), bad params or no answer
//     within max_iterations are fatal.
//
// A task whose params list several models (or whose type does) fans the same
// conversation out to all of them concurrently and returns each answer with
// its model name and latency.
//
// gate ai-worker wires it to flags and a config file (docs/workers.md).
package ai
