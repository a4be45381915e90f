/* A tiny MCP stdio server in C, built with `gcc -static` by the tests.
 *
 * It exists because the distroless-like rootfs has no libc, no Python and no shell: the only
 * MCP child that can run there is a static binary. It also starts in about a millisecond,
 * which is what the 100 crash/restart cycles test needs.
 *
 * Newline-delimited JSON-RPC 2.0; just enough JSON scanning for what the MCP client sends
 * (top-level "id" and "method" come before "params"). Tools:
 *   echo {text}  → the text back (still JSON-escaped, so it is copied verbatim)
 *   pid          → this process's pid
 *   crash        → exit(1) at once, no answer
 *   env {name}   → the variable's value or <unset>
 *   ask          → (not listed by default) asks the client one boolean by elicitation/create
 *                  and answers with the client's reply line verbatim
 *   file {path}  → the file's contents (up to 256 kB), or an isError result; not listed by
 *                  default (offer it through STATIC_TOOLS): the watch binary test polls it
 *   image {data} → an image content block with that base64 as PNG (not listed: offer it
 *                  through STATIC_TOOLS; media out in the binary)
 *   sleep {seconds} → "slept" after that many seconds (at most 60; not listed: offer it
 *                  through STATIC_TOOLS; a slow call for steering in the binary)
 * STATIC_TOOLS, when set, is sent as the tools/list result instead (a JSON object with a
 * "tools" list): a test can offer any names or schemas, served by the tools above.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define LINE_MAX_BYTES (1 << 20)

static char line[LINE_MAX_BYTES];
static char out[LINE_MAX_BYTES + 4096];

/* The raw JSON value following "key": (a string without its quotes, or a bare token). */
static int field(const char *from, const char *key, char *dst, size_t cap) {
    char pattern[64];
    snprintf(pattern, sizeof pattern, "\"%s\"", key);
    const char *p = strstr(from, pattern);
    if (!p) return 0;
    p += strlen(pattern);
    while (*p == ' ' || *p == ':') p++;
    size_t n = 0;
    if (*p == '"') {
        p++;
        while (*p && *p != '"' && n + 1 < cap) {
            if (*p == '\\' && p[1]) dst[n++] = *p++;
            dst[n++] = *p++;
        }
    } else {
        while (*p && *p != ',' && *p != '}' && n + 1 < cap) dst[n++] = *p++;
    }
    dst[n] = 0;
    return 1;
}

static void reply(const char *id, const char *result) {
    printf("{\"jsonrpc\":\"2.0\",\"id\":%s,\"result\":%s}\n", id, result);
    fflush(stdout);
}

static void fail(const char *id, int code, const char *message) {
    printf("{\"jsonrpc\":\"2.0\",\"id\":%s,\"error\":{\"code\":%d,\"message\":\"%s\"}}\n",
           id, code, message);
    fflush(stdout);
}

static void text_result(const char *id, const char *text) {
    snprintf(out, sizeof out,
             "{\"content\":[{\"type\":\"text\",\"text\":\"%s\"}],\"isError\":false}", text);
    reply(id, out);
}

/* The file at `path` as JSON string content (escaped) into `dst`; 0 if it cannot be read. */
static int file_json(const char *path, char *dst, size_t cap) {
    FILE *f = fopen(path, "rb");
    if (!f) return 0;
    size_t n = 0;
    int c;
    while ((c = fgetc(f)) != EOF && n + 8 < cap && n < (256u << 10)) {
        if (c == '"' || c == '\\') {
            dst[n++] = '\\';
            dst[n++] = (char)c;
        } else if (c == '\n') {
            dst[n++] = '\\';
            dst[n++] = 'n';
        } else if (c < 0x20) {
            n += (size_t)snprintf(dst + n, cap - n, "\\u%04x", c);
        } else {
            dst[n++] = (char)c;
        }
    }
    dst[n] = 0;
    fclose(f);
    return 1;
}

static const char *TOOLS =
    "{\"tools\":["
    "{\"name\":\"echo\",\"description\":\"Return the text unchanged.\","
    "\"inputSchema\":{\"type\":\"object\",\"properties\":{\"text\":{\"type\":\"string\"}},"
    "\"required\":[\"text\"]}},"
    "{\"name\":\"pid\",\"description\":\"This server's process id.\","
    "\"inputSchema\":{\"type\":\"object\",\"properties\":{}}},"
    "{\"name\":\"crash\",\"description\":\"Exit at once without answering.\","
    "\"inputSchema\":{\"type\":\"object\",\"properties\":{}}},"
    "{\"name\":\"env\",\"description\":\"One environment variable of this server.\","
    "\"inputSchema\":{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\"}},"
    "\"required\":[\"name\"]}}"
    "]}";

int main(void) {
    static char id[256], method[128], name[128], arg[LINE_MAX_BYTES];
    while (fgets(line, sizeof line, stdin)) {
        if (!field(line, "id", id, sizeof id)) continue; /* a notification */
        if (!field(line, "method", method, sizeof method)) continue; /* a response */
        if (strcmp(method, "initialize") == 0) {
            reply(id, "{\"protocolVersion\":\"2025-06-18\",\"capabilities\":{\"tools\":{}},"
                      "\"serverInfo\":{\"name\":\"static-fixture\",\"version\":\"1\"},"
                      "\"instructions\":\"A static fixture server.\"}");
        } else if (strcmp(method, "ping") == 0) {
            reply(id, "{}");
        } else if (strcmp(method, "tools/list") == 0) {
            const char *custom = getenv("STATIC_TOOLS");
            reply(id, custom && *custom ? custom : TOOLS);
        } else if (strcmp(method, "tools/call") == 0) {
            const char *params = strstr(line, "\"params\"");
            if (!params || !field(params, "name", name, sizeof name)) {
                fail(id, -32602, "missing tool name");
            } else if (strcmp(name, "echo") == 0) {
                const char *args = strstr(params, "\"arguments\"");
                if (!args || !field(args, "text", arg, sizeof arg)) arg[0] = 0;
                text_result(id, arg);
            } else if (strcmp(name, "pid") == 0) {
                snprintf(arg, sizeof arg, "%d", (int)getpid());
                text_result(id, arg);
            } else if (strcmp(name, "crash") == 0) {
                fprintf(stderr, "static fixture: crash requested\n");
                exit(1);
            } else if (strcmp(name, "env") == 0) {
                const char *args = strstr(params, "\"arguments\"");
                const char *value = NULL;
                if (args && field(args, "name", arg, sizeof arg)) value = getenv(arg);
                text_result(id, value ? value : "<unset>");
            } else if (strcmp(name, "ask") == 0) {
                printf("{\"jsonrpc\":\"2.0\",\"id\":\"ask-1\",\"method\":\"elicitation/create\","
                       "\"params\":{\"message\":\"Proceed with the static step?\","
                       "\"requestedSchema\":{\"type\":\"object\",\"properties\":{\"ok\":"
                       "{\"type\":\"boolean\",\"title\":\"Proceed\"}},\"required\":[\"ok\"]}}}\n");
                fflush(stdout);
                static char answer[LINE_MAX_BYTES];
                answer[0] = 0;
                while (fgets(line, sizeof line, stdin)) {
                    if (strstr(line, "\"ask-1\"") && !strstr(line, "\"method\"")) {
                        size_t n = 0;  /* the reply line, quotes made harmless for a text */
                        for (const char *c = line; *c && *c != '\n' && n + 2 < sizeof answer; c++)
                            answer[n++] = *c == '"' ? '\'' : *c;
                        answer[n] = 0;
                        break;
                    }
                }
                text_result(id, answer);
            } else if (strcmp(name, "file") == 0) {
                const char *args = strstr(params, "\"arguments\"");
                static char path[4096];
                if (args && field(args, "path", path, sizeof path) &&
                    file_json(path, arg, sizeof arg)) {
                    text_result(id, arg);
                } else {
                    reply(id, "{\"content\":[{\"type\":\"text\",\"text\":\"cannot read "
                              "the file\"}],\"isError\":true}");
                }
            } else if (strcmp(name, "image") == 0) {
                const char *args = strstr(params, "\"arguments\"");
                if (!args || !field(args, "data", arg, sizeof arg)) arg[0] = 0;
                snprintf(out, sizeof out,
                         "{\"content\":[{\"type\":\"text\",\"text\":\"an image:\"},"
                         "{\"type\":\"image\",\"data\":\"%s\",\"mimeType\":\"image/png\"}],"
                         "\"isError\":false}", arg);
                reply(id, out);
            } else if (strcmp(name, "sleep") == 0) {
                const char *args = strstr(params, "\"arguments\"");
                int seconds = args && field(args, "seconds", arg, sizeof arg) ? atoi(arg) : 1;
                sleep((unsigned)(seconds < 0 ? 0 : seconds > 60 ? 60 : seconds));
                text_result(id, "slept");
            } else {
                fail(id, -32602, "unknown tool");
            }
        } else {
            fail(id, -32601, "method not found");
        }
    }
    return 0;
}
