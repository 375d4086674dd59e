// Screenshot of a `wick sheet --html` page (the picture in docs/), taken by
// Debian's headless chromium through playwright-core with the network
// blocked: the page must render from its own bytes.
//   node scripts/sheet_screenshot.mjs SHEET.html OUT.png
import path from "node:path";
import {launchChromium} from "../tests/e2e/helpers.mjs";

const [html, out] = process.argv.slice(2);
if (!html || !out) {
    console.error("usage: node scripts/sheet_screenshot.mjs SHEET.html OUT.png");
    process.exit(2);
}
const browser = await launchChromium();
try {
    const page = await browser.newPage({viewport: {width: 1180, height: 900}, deviceScaleFactor: 1});
    const fetched = [];
    await page.route("**/*", (route) => {
        const url = route.request().url();
        if (url.startsWith("file://")) return route.continue();
        fetched.push(url);
        return route.abort();
    });
    await page.goto("file://" + path.resolve(html));
    const charts = await page.locator("svg").count();
    const points = await page.locator("svg circle").count();
    if (fetched.length) throw new Error(`the page asked the network for ${fetched.join(", ")}`);
    if (charts < 4 || points < 2) throw new Error(`expected 4 charts with points, found ${charts} charts, ${points} points`);
    await page.screenshot({path: out, fullPage: true});
    console.log(`${out}: ${charts} charts, ${points} points, no network requests`);
} finally {
    await browser.close();
}
