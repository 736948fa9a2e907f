// Drives Debian's chromium with puppeteer-core: opens PAGE_URL (served from its own origin),
// runs window.scenario(API_URL, API_KEY) and prints its result as one JSON line.
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import puppeteer from "puppeteer-core";

const browser = await puppeteer.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  headless: true,
  userDataDir: mkdtempSync(path.join(tmpdir(), "threadline-chromium-")),
  args: [
    "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
    "--disable-component-update", "--disable-sync",
  ],
});
const problems = [];
try {
  const page = await browser.newPage();
  page.on("pageerror", (error) => problems.push(`pageerror: ${error.message}`));
  page.on("console", (message) => message.type() === "error" && problems.push(`console: ${message.text()}`));
  page.on("response", (response) => response.status() >= 400 && problems.push(`response: ${response.status()} ${response.url()}`));
  page.on("requestfailed", (request) => {
    // The SDK aborts a stream's fetch once it has read the end: that is not a failure. A CORS
    // refusal is net::ERR_FAILED (with a console error) and stays a problem.
    const reason = request.failure()?.errorText;
    if (reason !== "net::ERR_ABORTED") problems.push(`requestfailed: ${request.url()} ${reason}`);
  });
  await page.goto(process.env.PAGE_URL, { waitUntil: "load" });
  await page.waitForFunction("window.ready === true", { timeout: 60000 });
  const result = await page.evaluate(
    (apiUrl, apiKey) => window.scenario(apiUrl, apiKey),
    process.env.API_URL,
    process.env.API_KEY,
  );
  console.log(JSON.stringify({ result, problems }));
} catch (error) {
  console.log(JSON.stringify({ error: String(error?.stack || error), problems }));
} finally {
  await browser.close();
}
