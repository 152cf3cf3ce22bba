// The chat page (GET /) in headless Chromium: load it, send a message, wait for the streamed answer, screenshot.
//   node tests/server/page_test.mjs http://127.0.0.1:PORT out.png
// Debian's chromium (/usr/bin/chromium) through playwright-core, with a fresh profile directory. Prints a JSON line
// RESULT {"reasoning": ..., "content": ..., "meta": ..., "chunks": N, "cross_origin": {...}} and exits 1 on failure.
// Then a page of another origin calls the API (CORS, preflighted), which must succeed.
import { chromium } from "playwright-core";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

const [base, out] = process.argv.slice(2);
if (!base || !out) { console.error("usage: node page_test.mjs BASE_URL OUT.png"); process.exit(2); }
const profile = mkdtempSync(join(tmpdir(), "glm53-chromium-"));
let context;
try {
  context = await chromium.launchPersistentContext(profile, {
    executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
    headless: true,
    viewport: { width: 900, height: 640 },
    args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
           "--disable-component-update", "--disable-sync", "--no-first-run"],
  });
  const page = context.pages()[0] || await context.newPage();
  // Count the SSE chunks the page reads, to show the answer arrived as a stream.
  let chunks = 0;
  page.on("response", async (r) => {
    if (r.url().endsWith("/v1/chat/completions")) {
      const body = await r.text().catch(() => "");
      chunks = (body.match(/^data: /gm) || []).length;
    }
  });
  await page.goto(base + "/");
  await page.waitForFunction(() => document.getElementById("status").textContent === "ready", null, { timeout: 20000 });
  await page.fill("#input", "Hello! What can you tell me about the weather?");
  await page.press("#input", "Enter");
  await page.waitForFunction(() => {
    const m = document.querySelector(".assistant .meta");
    return m && m.textContent.includes("tokens");
  }, null, { timeout: 60000 });
  const result = await page.evaluate(() => ({
    reasoning: document.querySelector(".assistant .reasoning").textContent,
    content: document.querySelector(".assistant .content").textContent,
    meta: document.querySelector(".assistant .meta").textContent,
    user: document.querySelector(".user").textContent,
  }));
  await page.waitForTimeout(200);
  result.chunks = chunks;
  // CORS: a page of another origin (http://localhost:PORT is not http://127.0.0.1:PORT) posts JSON to the API, which
  // the browser preflights; the server allows any origin by default (--allowed-origins).
  const other = await context.newPage();
  await other.goto(base.replace("127.0.0.1", "localhost") + "/health");
  result.cross_origin = await other.evaluate(async (api) => {
    try {
      const r = await fetch(api + "/v1/chat/completions", {
        method: "POST", headers: { "Content-Type": "application/json" },
        body: JSON.stringify({ messages: [{ role: "user", content: "hi" }], max_tokens: 4 }),
      });
      const j = await r.json();
      return { origin: location.origin, status: r.status, choices: (j.choices || []).length };
    } catch (e) {
      return { origin: location.origin, error: String(e) };
    }
  }, base);
  await other.close();
  await page.screenshot({ path: out, fullPage: true });
  console.log("RESULT " + JSON.stringify(result));
  if (!(result.reasoning + result.content).length) throw new Error("no answer on the page");
  if (result.cross_origin.status !== 200 || result.cross_origin.choices !== 1) {
    throw new Error("the cross-origin request failed: " + JSON.stringify(result.cross_origin));
  }
} catch (e) {
  console.error(e && e.stack || e);
  process.exitCode = 1;
} finally {
  if (context) await context.close();
  rmSync(profile, { recursive: true, force: true });
}
