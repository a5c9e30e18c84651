// AsyncGate's MCP door behind an OpenID provider, driven by the official MCP
// TypeScript SDK's OAuth client support: on the gate's 401 the SDK reads the
// protected resource metadata, discovers the provider, obtains a token and
// retries, as a hosted connector does.
//
// Usage: node oauth.mjs GATE_URL ISSUER
//
// The provider (host/oauth/oauthtest) must have the confidential client
// "svc" (secret "s") and the public client "cli" (redirect URI
// http://localhost/callback); its user test-user2 / verysecure signs in on
// its login page. The gate maps "svc" and the user to agent principals and
// has a task type "echo". Prints one "ok …" line per check, the task ids
// it queued as "task <flow> <id>", and "OAUTH OK" at the end; exits 1 on
// the first failure.

import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { UnauthorizedError } from "@modelcontextprotocol/sdk/client/auth.js";
import { ClientCredentialsProvider } from "@modelcontextprotocol/sdk/client/auth-extensions.js";

const [base, issuer] = process.argv.slice(2);
if (!base || !issuer) {
  console.error("usage: node oauth.mjs GATE_URL ISSUER");
  process.exit(2);
}
const mcpURL = new URL("/mcp", base);

function check(cond, what, detail) {
  if (!cond) {
    throw new Error(`FAIL ${what}${detail === undefined ? "" : ": " + JSON.stringify(detail)}`);
  }
  console.log(`ok ${what}`);
}

async function queueEcho(client, flow) {
  const res = await client.callTool({ name: "queue_task", arguments: { task_type: "echo", params: { flow } } });
  check(!res.isError, `${flow}: queue_task through the token`, res.content);
  console.log(`task ${flow} ${res.structuredContent.task_id}`);
}

// A service: client credentials (ClientCredentialsProvider).
{
  const provider = new ClientCredentialsProvider({ clientId: "svc", clientSecret: "s", scope: "asyncgate", expectedIssuer: issuer });
  const client = new Client({ name: "oauth-svc", version: "1.0.0" });
  await client.connect(new StreamableHTTPClientTransport(mcpURL, { authProvider: provider }));
  check(provider.tokens()?.access_token, "client credentials: the SDK obtained a token after the 401");
  const tools = await client.listTools();
  check(tools.tools.some((t) => t.name === "queue_task"), "client credentials: tools/list");
  await queueEcho(client, "client_credentials");
  await client.close();
}

// A user: authorization code with PKCE. The SDK builds the authorization
// URL (code_challenge S256, resource); "the browser" signs in on the
// provider's login page and brings back the code.
class UserProvider {
  constructor() {
    this._tokens = undefined;
    this._verifier = undefined;
    this.code = undefined;
    this.authURL = undefined;
  }
  get redirectUrl() { return "http://localhost/callback"; }
  get clientMetadata() {
    return { client_name: "oauth-user", redirect_uris: ["http://localhost/callback"], grant_types: ["authorization_code"],
      response_types: ["code"], token_endpoint_auth_method: "none" };
  }
  clientInformation() { return { client_id: "cli" }; }
  tokens() { return this._tokens; }
  saveTokens(t) { this._tokens = t; }
  saveCodeVerifier(v) { this._verifier = v; }
  codeVerifier() { return this._verifier; }
  async redirectToAuthorization(url) {
    this.authURL = url;
    this.code = await signIn(url, "test-user2", "verysecure");
  }
}

// signIn follows the authorization URL as a browser would, fills the login
// form and returns the code of the redirect back to the client.
async function signIn(url, user, password) {
  let next = url.toString();
  for (let i = 0; i < 10; i++) {
    const res = await fetch(next, { redirect: "manual" });
    const loc = res.headers.get("location");
    if (res.status >= 300 && res.status < 400 && loc) {
      const u = new URL(loc, next);
      if (u.host === "localhost") return codeOf(u);
      next = u.toString();
      continue;
    }
    const page = await res.text();
    const m = page.match(/name="id" value="([^"]+)"/);
    if (!m) throw new Error(`FAIL sign-in: no login form at ${next}: ${res.status} ${page.slice(0, 200)}`);
    const post = await fetch(new URL("/login/username", next), {
      method: "POST", redirect: "manual",
      headers: { "Content-Type": "application/x-www-form-urlencoded" },
      body: new URLSearchParams({ username: user, password, id: m[1] }),
    });
    const ploc = post.headers.get("location");
    if (!ploc) throw new Error(`FAIL sign-in: ${post.status} ${(await post.text()).slice(0, 200)}`);
    const u = new URL(ploc, next);
    if (u.host === "localhost") return codeOf(u);
    next = u.toString();
  }
  throw new Error("FAIL sign-in: too many redirects");
}

function codeOf(u) {
  const code = u.searchParams.get("code");
  if (!code) throw new Error(`FAIL sign-in: redirect without a code: ${u}`);
  return code;
}

{
  const provider = new UserProvider();
  const transport = new StreamableHTTPClientTransport(mcpURL, { authProvider: provider });
  const client = new Client({ name: "oauth-user", version: "1.0.0" });
  let refused;
  try {
    await client.connect(transport);
  } catch (e) {
    refused = e;
  }
  check(refused instanceof UnauthorizedError && provider.code, "authorization code: the SDK started the flow on the 401", String(refused));
  const au = provider.authURL;
  check(au.searchParams.get("code_challenge_method") === "S256" && au.searchParams.get("resource") === mcpURL.href,
    "authorization code: PKCE S256 and the resource indicator from the metadata", au.toString());
  await transport.finishAuth(provider.code);
  check(provider.tokens()?.access_token, "authorization code: the SDK exchanged the code for a token");
  const again = new Client({ name: "oauth-user", version: "1.0.0" });
  await again.connect(new StreamableHTTPClientTransport(mcpURL, { authProvider: provider }));
  await queueEcho(again, "authorization_code");
  await again.close();
}

console.log("OAUTH OK");
