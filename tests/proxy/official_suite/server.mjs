// An "everything" MCP server for the official conformance suite's server scenarios, written
// here on the TypeScript SDK's low-level Server from what each scenario's description asks
// for. Streamable HTTP with sessions, an event store (SSE resumption) and the SDK's own
// Host validation for loopback servers. Usage: node server.mjs PORT
import { randomUUID } from 'node:crypto';

import { createMcpExpressApp } from '@modelcontextprotocol/sdk/server/express.js';
import { Server } from '@modelcontextprotocol/sdk/server/index.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { InMemoryEventStore } from '@modelcontextprotocol/sdk/examples/shared/inMemoryEventStore.js';
import {
  CallToolRequestSchema,
  CompleteRequestSchema,
  CreateMessageResultSchema,
  ElicitResultSchema,
  GetPromptRequestSchema,
  ListPromptsRequestSchema,
  ListResourceTemplatesRequestSchema,
  ListResourcesRequestSchema,
  ListToolsRequestSchema,
  McpError,
  ReadResourceRequestSchema,
  SubscribeRequestSchema,
  UnsubscribeRequestSchema,
  isInitializeRequest
} from '@modelcontextprotocol/sdk/types.js';

const PNG =
  'iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAIAAACQd1PeAAAADElEQVR4nGP4z8AAAAMBAQDJ/pLvAAAAAElFTkSuQmCC';
const WAV = 'UklGRiwAAABXQVZFZm10IBAAAAABAAEAQB8AAEAfAAABAAgAZGF0YQgAAACAgICAgICAgA==';
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
const text = (t) => ({ content: [{ type: 'text', text: t }] });
const none = { type: 'object', properties: {} };
const oneString = (name, description) => ({
  type: 'object',
  properties: { [name]: { type: 'string', description } },
  required: [name]
});

const TOOLS = [
  ['test_simple_text', 'Returns simple text', none],
  ['test_image_content', 'Returns a PNG image', none],
  ['test_audio_content', 'Returns a WAV clip', none],
  ['test_embedded_resource', 'Returns an embedded resource', none],
  ['test_multiple_content_types', 'Returns text, image and resource', none],
  ['test_tool_with_logging', 'Logs three messages while it runs', none],
  ['test_tool_with_progress', 'Reports progress while it runs', none],
  ['test_error_handling', 'Always ends in a tool error', none],
  ['test_sampling', 'Asks the client for a completion', oneString('prompt', 'The prompt')],
  ['test_elicitation', 'Asks the user for input', oneString('message', 'The message')],
  ['test_elicitation_sep1034_defaults', 'Elicitation with defaults', none],
  ['test_elicitation_sep1330_enums', 'Elicitation with every enum form', none],
  ['test_reconnection', 'Closes its SSE stream mid-call, then answers', none],
  [
    'json_schema_2020_12_tool',
    'Tool with JSON Schema 2020-12 features',
    {
      $schema: 'https://json-schema.org/draft/2020-12/schema',
      type: 'object',
      $defs: {
        address: {
          $anchor: 'addressDef',
          type: 'object',
          properties: { street: { type: 'string' }, city: { type: 'string' } }
        }
      },
      properties: {
        name: { type: 'string' },
        address: { $ref: '#/$defs/address' },
        contactMethod: { type: 'string', enum: ['phone', 'email'] },
        phone: { type: 'string' },
        email: { type: 'string' }
      },
      allOf: [{ anyOf: [{ required: ['phone'] }, { required: ['email'] }] }],
      if: { properties: { contactMethod: { const: 'phone' } }, required: ['contactMethod'] },
      then: { required: ['phone'] },
      else: { required: ['email'] },
      additionalProperties: false
    }
  ]
].map(([name, description, inputSchema]) => ({ name, description, inputSchema }));

const RESOURCES = [
  { uri: 'test://static-text', name: 'static-text', description: 'Static text', mimeType: 'text/plain' },
  { uri: 'test://static-binary', name: 'static-binary', description: 'A PNG', mimeType: 'image/png' },
  { uri: 'test://watched-resource', name: 'watched', description: 'Subscribable', mimeType: 'text/plain' }
];
const TEMPLATE = /^test:\/\/template\/([^/]+)\/data$/;

const PROMPTS = [
  { name: 'test_simple_prompt', description: 'A prompt without arguments' },
  {
    name: 'test_prompt_with_arguments',
    description: 'A prompt with two arguments',
    arguments: [
      { name: 'arg1', description: 'First test argument', required: true },
      { name: 'arg2', description: 'Second test argument', required: true }
    ]
  },
  {
    name: 'test_prompt_with_embedded_resource',
    description: 'A prompt that embeds a resource',
    arguments: [{ name: 'resourceUri', description: 'URI to embed', required: true }]
  },
  { name: 'test_prompt_with_image', description: 'A prompt with an image' }
];

const ENUMS_SCHEMA = {
  type: 'object',
  properties: {
    untitledSingle: { type: 'string', enum: ['option1', 'option2', 'option3'] },
    titledSingle: {
      type: 'string',
      oneOf: [
        { const: 'value1', title: 'First Option' },
        { const: 'value2', title: 'Second Option' },
        { const: 'value3', title: 'Third Option' }
      ]
    },
    legacyEnum: {
      type: 'string',
      enum: ['opt1', 'opt2', 'opt3'],
      enumNames: ['Option One', 'Option Two', 'Option Three']
    },
    untitledMulti: {
      type: 'array',
      items: { type: 'string', enum: ['option1', 'option2', 'option3'] }
    },
    titledMulti: {
      type: 'array',
      items: {
        anyOf: [
          { const: 'value1', title: 'First Choice' },
          { const: 'value2', title: 'Second Choice' },
          { const: 'value3', title: 'Third Choice' }
        ]
      }
    }
  }
};

const DEFAULTS_SCHEMA = {
  type: 'object',
  properties: {
    name: { type: 'string', default: 'John Doe' },
    age: { type: 'integer', default: 30 },
    score: { type: 'number', default: 95.5 },
    status: { type: 'string', enum: ['active', 'inactive', 'pending'], default: 'active' },
    verified: { type: 'boolean', default: true }
  }
};

async function callTool(name, args, extra) {
  const notify = (method, params) => extra.sendNotification({ method, params });
  const log = (data) => notify('notifications/message', { level: 'info', data });
  const elicit = async (message, requestedSchema) => {
    const answer = await extra.sendRequest(
      { method: 'elicitation/create', params: { message, requestedSchema } },
      ElicitResultSchema
    );
    return text(
      `Elicitation completed: action=${answer.action}, content=${JSON.stringify(answer.content ?? {})}`
    );
  };
  switch (name) {
    case 'test_simple_text':
      return text('This is a simple text response for testing.');
    case 'test_image_content':
      return { content: [{ type: 'image', data: PNG, mimeType: 'image/png' }] };
    case 'test_audio_content':
      return { content: [{ type: 'audio', data: WAV, mimeType: 'audio/wav' }] };
    case 'test_embedded_resource':
      return {
        content: [
          {
            type: 'resource',
            resource: {
              uri: 'test://embedded-resource',
              mimeType: 'text/plain',
              text: 'This is an embedded resource content.'
            }
          }
        ]
      };
    case 'test_multiple_content_types':
      return {
        content: [
          { type: 'text', text: 'Multiple content types test:' },
          { type: 'image', data: PNG, mimeType: 'image/png' },
          {
            type: 'resource',
            resource: {
              uri: 'test://mixed-content-resource',
              mimeType: 'application/json',
              text: JSON.stringify({ test: 'data', value: 123 })
            }
          }
        ]
      };
    case 'test_tool_with_logging':
      await log('Tool execution started');
      await sleep(50);
      await log('Tool processing data');
      await sleep(50);
      await log('Tool execution completed');
      return text('Logging test completed');
    case 'test_tool_with_progress': {
      const token = extra._meta?.progressToken;
      for (const progress of [0, 50, 100]) {
        if (token !== undefined) {
          await notify('notifications/progress', { progressToken: token, progress, total: 100 });
        }
        if (progress < 100) await sleep(50);
      }
      return text('Progress test completed');
    }
    case 'test_error_handling':
      return { isError: true, content: [{ type: 'text', text: 'This tool intentionally returns an error for testing' }] };
    case 'test_sampling': {
      const answer = await extra.sendRequest(
        {
          method: 'sampling/createMessage',
          params: {
            messages: [{ role: 'user', content: { type: 'text', text: String(args.prompt) } }],
            maxTokens: 100
          }
        },
        CreateMessageResultSchema
      );
      const said = answer.content?.type === 'text' ? answer.content.text : JSON.stringify(answer.content);
      return text(`LLM response: ${said}`);
    }
    case 'test_elicitation': {
      const answer = await extra.sendRequest(
        {
          method: 'elicitation/create',
          params: {
            message: String(args.message),
            requestedSchema: {
              type: 'object',
              properties: {
                username: { type: 'string', description: "User's response" },
                email: { type: 'string', description: "User's email address" }
              },
              required: ['username', 'email']
            }
          }
        },
        ElicitResultSchema
      );
      return text(`User response: action=${answer.action}, content=${JSON.stringify(answer.content ?? {})}`);
    }
    case 'test_elicitation_sep1034_defaults':
      return elicit('Please review the defaults', DEFAULTS_SCHEMA);
    case 'test_elicitation_sep1330_enums':
      return elicit('Please choose', ENUMS_SCHEMA);
    case 'test_reconnection':
      // The client reconnects with Last-Event-ID and gets the answer from the event store.
      await sleep(50);
      extra.closeSSEStream?.();
      await sleep(200);
      return text('Reconnection test completed');
    case 'json_schema_2020_12_tool':
      return text(`Received: ${JSON.stringify(args)}`);
    default:
      throw new McpError(-32602, `Unknown tool: ${name}`);
  }
}

function readResource(uri) {
  if (uri === 'test://static-text') {
    return { uri, mimeType: 'text/plain', text: 'This is the content of the static text resource.' };
  }
  if (uri === 'test://static-binary') return { uri, mimeType: 'image/png', blob: PNG };
  if (uri === 'test://watched-resource') return { uri, mimeType: 'text/plain', text: 'Watched.' };
  const match = TEMPLATE.exec(uri);
  if (match) {
    const id = match[1];
    const body = { id, templateTest: true, data: `Data for ID: ${id}` };
    return { uri, mimeType: 'application/json', text: JSON.stringify(body) };
  }
  throw new McpError(-32002, `Resource not found: ${uri}`);
}

function getPrompt(name, args) {
  const user = (content) => ({ role: 'user', content });
  switch (name) {
    case 'test_simple_prompt':
      return { messages: [user({ type: 'text', text: 'This is a simple prompt for testing.' })] };
    case 'test_prompt_with_arguments':
      return {
        messages: [
          user({ type: 'text', text: `Prompt with arguments: arg1='${args.arg1}', arg2='${args.arg2}'` })
        ]
      };
    case 'test_prompt_with_embedded_resource':
      return {
        messages: [
          user({
            type: 'resource',
            resource: { uri: args.resourceUri, mimeType: 'text/plain', text: 'Embedded resource content for testing.' }
          }),
          user({ type: 'text', text: 'Please process the embedded resource above.' })
        ]
      };
    case 'test_prompt_with_image':
      return {
        messages: [
          user({ type: 'image', data: PNG, mimeType: 'image/png' }),
          user({ type: 'text', text: 'Please analyze the image above.' })
        ]
      };
    default:
      throw new McpError(-32602, `Unknown prompt: ${name}`);
  }
}

function newServer() {
  const server = new Server(
    { name: 'idemtools-suite-everything', version: '1.0.0' },
    {
      capabilities: {
        tools: { listChanged: true },
        resources: { subscribe: true, listChanged: true },
        prompts: { listChanged: true },
        logging: {},
        completions: {}
      }
    }
  );
  const subscriptions = new Set();
  server.setRequestHandler(ListToolsRequestSchema, () => ({ tools: TOOLS }));
  server.setRequestHandler(CallToolRequestSchema, (request, extra) =>
    callTool(request.params.name, request.params.arguments ?? {}, extra)
  );
  server.setRequestHandler(ListResourcesRequestSchema, () => ({ resources: RESOURCES }));
  server.setRequestHandler(ListResourceTemplatesRequestSchema, () => ({
    resourceTemplates: [
      {
        uriTemplate: 'test://template/{id}/data',
        name: 'template',
        description: 'Data for an id',
        mimeType: 'application/json'
      }
    ]
  }));
  server.setRequestHandler(ReadResourceRequestSchema, (request) => ({
    contents: [readResource(request.params.uri)]
  }));
  server.setRequestHandler(SubscribeRequestSchema, (request) => {
    subscriptions.add(request.params.uri);
    return {};
  });
  server.setRequestHandler(UnsubscribeRequestSchema, (request) => {
    subscriptions.delete(request.params.uri);
    return {};
  });
  server.setRequestHandler(ListPromptsRequestSchema, () => ({ prompts: PROMPTS }));
  server.setRequestHandler(GetPromptRequestSchema, (request) =>
    getPrompt(request.params.name, request.params.arguments ?? {})
  );
  server.setRequestHandler(CompleteRequestSchema, (request) => {
    const prefix = String(request.params.argument?.value ?? '');
    const values = ['paris', 'park', 'party'].filter((v) => v.startsWith(prefix));
    return { completion: { values, total: values.length, hasMore: false } };
  });
  return server;
}

const port = Number(process.argv[2] ?? process.env.PORT ?? 3000);
const app = createMcpExpressApp({ host: '127.0.0.1' });
const eventStore = new InMemoryEventStore();
const sessions = new Map();

app.all('/mcp', async (req, res) => {
  const sessionId = req.headers['mcp-session-id'];
  const known = sessionId ? sessions.get(sessionId) : undefined;
  if (known) {
    await known.handleRequest(req, res, req.body);
    return;
  }
  if (sessionId) {
    res.status(404).json({ jsonrpc: '2.0', error: { code: -32001, message: 'Session not found' }, id: null });
    return;
  }
  if (req.method !== 'POST' || !isInitializeRequest(req.body)) {
    res.status(400).json({ jsonrpc: '2.0', error: { code: -32000, message: 'No valid session' }, id: null });
    return;
  }
  const transport = new StreamableHTTPServerTransport({
    sessionIdGenerator: () => randomUUID(),
    eventStore,
    retryInterval: 200,
    onsessioninitialized: (id) => sessions.set(id, transport)
  });
  transport.onclose = () => sessions.delete(transport.sessionId);
  await newServer().connect(transport);
  await transport.handleRequest(req, res, req.body);
});

app.listen(port, '127.0.0.1', () => console.error(`listening on http://127.0.0.1:${port}/mcp`));
