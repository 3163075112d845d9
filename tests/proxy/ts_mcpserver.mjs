// A TypeScript-SDK McpServer (the high-level API, whose tool manager refuses unknown tools):
// `node ts_mcpserver.mjs NODE_MODULES`, the SDK taken from tests/conformance/ts_server's install.
import { join } from "node:path";
import { pathToFileURL } from "node:url";

const sdk = join(process.argv[2], "@modelcontextprotocol", "sdk", "dist", "esm");
const load = (path) => import(pathToFileURL(join(sdk, ...path)).href);
const { McpServer } = await load(["server", "mcp.js"]);
const { StdioServerTransport } = await load(["server", "stdio.js"]);

const server = new McpServer({ name: "ts-mcpserver", version: "0.0.0" });
const text = (t) => ({ content: [{ type: "text", text: t }] });
server.registerTool("echo", { description: "answers ok" }, async () => text("ok"));
server.registerTool("off", { description: "disabled" }, async () => text("ran")).disable();
await server.connect(new StdioServerTransport());
