// The operator console: plain DOM, no framework, no build, no CDN. Everything it shows comes
// from /admin with the admin key as a bearer header (kept in sessionStorage: this tab only).
// Text from the gateway (key names, error messages) is only ever set as textContent.

const $ = (id) => document.getElementById(id);
const KEY = "ocm-admin-key";
let keyNames = new Map();
let timer = null;
let current = "overview";

function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else if (k === "text") el.textContent = v;
    else el.setAttribute(k, v === true ? "" : v);
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

function svg(tag, attrs = {}) {
  const el = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, v);
  return el;
}

function toast(message) {
  const t = $("toast");
  t.textContent = message;
  t.hidden = false;
  clearTimeout(toast.timer);
  toast.timer = setTimeout(() => { t.hidden = true; }, 3000);
}

async function api(path, options = {}) {
  const response = await fetch(path, {
    ...options,
    headers: { "authorization": `Bearer ${sessionStorage.getItem(KEY) || ""}`,
               "content-type": "application/json", ...(options.headers || {}) },
    cache: "no-store",
  });
  const body = await response.json().catch(() => ({}));
  if (response.status === 401) { logout(); throw new Error("The admin key was refused."); }
  if (!response.ok) throw new Error(body?.error?.message || `HTTP ${response.status}`);
  return body;
}

const fmt = (n) => n === null || n === undefined ? "–" : Number(n).toLocaleString("en-US");
const when = (unix) => unix ? new Date(unix * 1000).toISOString().replace("T", " ").slice(0, 16) : "–";
const table = (head, rows, empty) => rows.length === 0 ? h("p", { class: "empty", text: empty }) :
  h("table", {}, h("thead", {}, h("tr", {}, head.map(([label, cls]) => h("th", { class: cls, text: label })))),
    h("tbody", {}, rows));

// --- overview: models, replicas, live runs ------------------------------------------------
async function overview() {
  const [models, runs] = await Promise.all([api("/admin/models"), api("/admin/runs")]);
  $("models").replaceChildren(table([["Model"], ["Format"], ["Context", "num"], ["Upstream replicas"]],
    models.data.map((m) => h("tr", {},
      h("td", {}, h("strong", { text: m.id }), h("div", { class: "muted", text: m.backend })),
      h("td", { text: m.prompt_format }),
      h("td", { class: "num", text: fmt(m.context_window) }),
      h("td", {}, m.replicas.map((r) => h("div", {},
        h("span", { class: r.healthy ? "healthy" : "cooling", text: r.healthy ? "● " : "○ " }),
        h("span", { text: r.url }),
        h("span", { class: "muted", text: ` · ${r.in_flight} in flight` +
          (r.healthy ? "" : ` · cooling ${r.cooldown_seconds}s`) })))))),
    "No models configured."));
  $("runs-count").textContent = String(runs.data.length);
  $("runs").replaceChildren(table([["Run"], ["Model"], ["Key"], ["Age", "num"], ["Tokens", "num"], [""]],
    runs.data.map((r) => h("tr", { "data-run": r.id },
      h("td", { text: r.id.slice(0, 18) + "…", title: r.id }),
      h("td", { text: r.model }),
      h("td", { text: keyNames.get(r.key) || r.key || "–" }),
      h("td", { class: "num", text: `${r.age_seconds}s` }),
      h("td", { class: "num", text: fmt(r.tokens_so_far) }),
      h("td", {}, h("button", { class: "small danger", "data-cancel": r.id, onclick: async () => {
        await api(`/admin/runs/${encodeURIComponent(r.id)}/cancel`, { method: "POST" });
        toast("Run cancelled");
        refresh();
      } }, "Cancel")))),
    "Nothing running right now."));
}

// --- usage: a stacked bar chart over time, and the totals ---------------------------------
async function usage() {
  const days = Number($("usage-range").value);
  const by = $("usage-by").value;
  const grain = days <= 7 ? "hour" : "day";
  const from = Math.floor(Date.now() / 1000) - days * 86400;
  const [series, totals] = await Promise.all([
    api(`/admin/usage?group_by=${by},${grain}&from=${from}`),
    api(`/admin/usage?group_by=key,model&from=${from}`),
  ]);
  const label = (row) => by === "key" ? (keyNames.get(row.key) || row.key) : row.model;
  drawChart(series.data, label, grain, from);
  $("usage-table").replaceChildren(table(
    [["Key"], ["Model"], ["Requests", "num"], ["Input", "num"], ["Cached", "num hide-narrow"],
     ["Output", "num"], ["Reasoning", "num hide-narrow"], ["Tool rounds", "num hide-narrow"],
     ["Errors", "num"], ["p50 / p95 ms", "num hide-narrow"], ["Cost", "num hide-narrow"]],
    totals.data.map((r) => h("tr", {},
      h("td", { text: keyNames.get(r.key) || r.key }), h("td", { text: r.model }),
      h("td", { class: "num", text: fmt(r.requests) }), h("td", { class: "num", text: fmt(r.input_tokens) }),
      h("td", { class: "num hide-narrow", text: fmt(r.cached_tokens) }),
      h("td", { class: "num", text: fmt(r.output_tokens) }),
      h("td", { class: "num hide-narrow", text: fmt(r.reasoning_tokens) }),
      h("td", { class: "num hide-narrow", text: fmt(r.tool_rounds) }),
      h("td", { class: "num", text: fmt(r.errors), title: JSON.stringify(r.error_codes) }),
      h("td", { class: "num hide-narrow", text: `${fmt(r.latency_ms.p50)} / ${fmt(r.latency_ms.p95)}` }),
      h("td", { class: "num hide-narrow", text: r.cost ? r.cost.toFixed(4) : "–" }))),
    "No usage in this range yet."));
}

// The axis runs from the first bucket with data (at least MIN_BUCKETS back, never before the
// range asked for) to now, so a fresh gateway's hour of traffic is a bar, not a hairline at the
// right edge of a 7-day axis. The TOP names by volume get a colour each; the rest are one grey
// "others" stack.
const TOP = 5;
const MIN_BUCKETS = { hour: 12, day: 7 };

function chartAxis(rows, grain, from) {
  const step = grain === "hour" ? 3600 : 86400;
  const last = Math.floor(Date.now() / 1000 / step) * step;
  const earliest = Math.floor(from / step) * step;
  const first = rows.length ? Math.min(...rows.map((r) => r.start)) : last;
  const start = Math.max(earliest, Math.min(first, last - (MIN_BUCKETS[grain] - 1) * step));
  return { step, start, n: Math.round((last - start) / step) + 1 };
}

function chartSeries(rows, label) {
  const volume = new Map();
  for (const row of rows) volume.set(label(row), (volume.get(label(row)) || 0) + row.total_tokens);
  const ranked = [...volume.entries()].filter(([, v]) => v > 0).sort((a, b) => b[1] - a[1]);
  const shown = ranked.length > TOP + 1 ? ranked.slice(0, TOP) : ranked;
  const index = new Map(shown.map(([name], i) => [name, i]));
  const series = shown.map(([name, total]) => ({ name, total }));
  if (ranked.length > shown.length) {
    const rest = ranked.slice(shown.length);
    series.push({ name: `${rest.length} others`, total: rest.reduce((a, [, v]) => a + v, 0), other: true });
  }
  return { series, slot: (name) => index.has(name) ? index.get(name) : series.length - 1 };
}

function drawChart(rows, label, grain, from) {
  const { step, start, n } = chartAxis(rows, grain, from);
  const { series, slot } = chartSeries(rows, label);
  const stacks = Array.from({ length: n }, () => new Array(series.length).fill(0));
  for (const row of rows) {
    const i = Math.floor((row.start - start) / step);
    if (i >= 0 && i < n && row.total_tokens > 0) stacks[i][slot(label(row))] += row.total_tokens;
  }
  const max = Math.max(1, ...stacks.map((s) => s.reduce((a, b) => a + b, 0)));
  const W = 600, H = 200, bw = W / n;
  const chart = svg("svg", { viewBox: `0 0 ${W} ${H}`, preserveAspectRatio: "none", role: "img" });
  chart.append(svg("line", { x1: 0, y1: H - 0.5, x2: W, y2: H - 0.5, class: "axis" }));
  stacks.forEach((stack, i) => {
    let y = H;
    stack.forEach((v, c) => {
      if (!v) return;
      const hgt = (v / max) * (H - 4);
      y -= hgt;
      const bar = svg("rect", { x: i * bw + bw * 0.1, y, width: Math.max(1, bw * 0.8), height: hgt,
        class: series[c].other ? "cother" : `c${c}`, "data-series": series[c].name });
      const tip = svg("title", {});
      tip.textContent = `${series[c].name}, ${when(start + i * step)}: ${fmt(v)} tokens`;
      bar.append(tip);
      chart.append(bar);
    });
  });
  const stamp = (t) => when(t).slice(5, grain === "hour" ? 16 : 10);
  const ticks = h("div", { class: "ticks" },
    h("span", { text: stamp(start) }), h("span", { text: stamp(start + Math.floor((n - 1) / 2) * step) }),
    h("span", { text: grain === "hour" ? "now" : stamp(start + (n - 1) * step) }));
  $("chart").replaceChildren(
    h("div", { class: "ymax", text: `${fmt(max)} tokens / ${grain}` }), chart, ticks,
    series.length ? h("div", { class: "legend" }, series.map((s, c) => h("span", { "data-legend": s.name },
      h("i", { class: s.other ? "cother" : `c${c}` }), `${s.name} · ${fmt(s.total)}`)))
      : h("p", { class: "empty", text: "No tokens in this range yet." }));
}

// --- keys: list, create, edit limits, revoke, rotate ---------------------------------------
async function loadKeyNames() {
  const keys = await api("/admin/keys");
  keyNames = new Map(keys.data.map((k) => [k.id, k.name]));
  return keys.data;
}

function showSecret(secret, name) {
  $("secret").hidden = false;
  $("secret-value").textContent = secret;
  toast(`Key "${name}" ready`);
}

async function keys() {
  const list = await loadKeyNames();
  $("key-list").replaceChildren(table([["Name"], ["Owner", "hide-narrow"], ["Key"], ["Status"], ["Limits", "hide-narrow"],
    ["Budget"], [""]],
    list.map((k) => {
      const limits = [k.requests_per_minute && `${k.requests_per_minute} rpm`, k.tokens_per_minute && `${k.tokens_per_minute} tpm`,
        k.max_concurrent && `${k.max_concurrent} at once`].filter(Boolean).join(" · ") || "defaults";
      const budget = k.budget ? `${fmt(k.budget.tokens)} tokens / ${k.budget.period}` : "–";
      const row = h("tr", { "data-key": k.id },
        h("td", {}, h("strong", { text: k.name }), h("div", { class: "muted", text: k.models ? k.models.join(", ") : "all models" })),
        h("td", { class: "hide-narrow", text: k.owner || "–" }),
        h("td", {}, h("code", { text: k.hint })),
        h("td", { class: `status-${k.status}`, text: k.status }),
        h("td", { class: "hide-narrow", text: limits }),
        h("td", { text: budget }),
        h("td", {}, k.status === "revoked" ? null : [
          h("button", { class: "small", "data-edit": k.id, onclick: () => editRow(row, k) }, "Edit"),
          h("button", { class: "small", "data-rotate": k.id, onclick: async () => {
            const r = await api(`/admin/keys/${k.id}/rotate`, { method: "POST" });
            showSecret(r.secret, k.name);
            keys();
          } }, "Rotate"),
          h("button", { class: "small danger", "data-revoke": k.id, onclick: async () => {
            await api(`/admin/keys/${k.id}/revoke`, { method: "POST" });
            toast(`Key "${k.name}" revoked`);
            keys();
          } }, "Revoke")]));
      return row;
    }), "No keys yet: create one."));
}

function editRow(row, k) {
  const num = (name, value) => h("input", { name, type: "number", min: "1", value: value ?? "" });
  const form = h("form", { class: "row" },
    h("label", {}, "rpm", num("requests_per_minute", k.requests_per_minute)),
    h("label", {}, "tpm", num("tokens_per_minute", k.tokens_per_minute)),
    h("label", {}, "concurrent", num("max_concurrent", k.max_concurrent)),
    h("label", {}, "budget tokens", num("budget_tokens", k.budget?.tokens)),
    h("button", { type: "submit" }, "Save"));
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    const f = new FormData(form);
    const int = (n) => f.get(n) ? Number(f.get(n)) : null;
    const tokens = int("budget_tokens");
    await api(`/admin/keys/${k.id}`, { method: "POST", body: JSON.stringify({
      requests_per_minute: int("requests_per_minute"), tokens_per_minute: int("tokens_per_minute"),
      max_concurrent: int("max_concurrent"),
      budget: tokens ? { tokens, period: k.budget?.period || "month" } : null }) });
    toast("Limits saved");
    keys();
  });
  row.after(h("tr", {}, h("td", { colspan: "7" }, form)));
}

async function createKey(e) {
  e.preventDefault();
  const f = new FormData(e.target);
  const text = (n) => (f.get(n) || "").trim() || null;
  const int = (n) => f.get(n) ? Number(f.get(n)) : null;
  const models = text("models");
  const body = { name: text("name"), owner: text("owner"),
    models: models ? models.split(",").map((m) => m.trim()).filter(Boolean) : null,
    requests_per_minute: int("requests_per_minute"), tokens_per_minute: int("tokens_per_minute"),
    max_concurrent: int("max_concurrent"),
    budget: int("budget_tokens") ? { tokens: int("budget_tokens"), period: f.get("budget_period") } : null,
    expires_at: f.get("expires") ? Math.floor(Date.parse(f.get("expires") + "T23:59:59Z") / 1000) : null };
  const created = await api("/admin/keys", { method: "POST", body: JSON.stringify(body) });
  showSecret(created.secret, created.name);
  e.target.reset();
  keys();
}

// --- errors -------------------------------------------------------------------------------
async function errors() {
  const list = await api("/admin/errors?limit=100");
  $("error-list").replaceChildren(table([["When"], ["Status"], ["Code"], ["Request id"], ["Path", "hide-narrow"],
    ["Key", "hide-narrow"], ["Message", "hide-narrow"]],
    list.data.map((e) => h("tr", {},
      h("td", { text: new Date(e.time * 1000).toLocaleTimeString() }),
      h("td", { class: "error", text: e.status }), h("td", { text: e.code || "–" }),
      h("td", {}, h("code", { text: e.request_id })), h("td", { class: "hide-narrow", text: `${e.method} ${e.path}` }),
      h("td", { class: "hide-narrow", text: keyNames.get(e.key) || e.key || "–" }),
      h("td", { class: "hide-narrow", text: e.message || "" }))),
    "No errors recently."));
}

// --- shell --------------------------------------------------------------------------------
const views = { overview, usage, keys, errors };

async function refresh() {
  try { await views[current](); } catch (err) { toast(err.message); }
}

function show(tab) {
  current = tab;
  $("secret").hidden = true;  // a new secret is shown once: gone when the operator moves on
  $("secret-value").textContent = "";
  for (const b of document.querySelectorAll("#tabs button")) b.classList.toggle("on", b.dataset.tab === tab);
  for (const s of document.querySelectorAll(".tab")) s.hidden = s.id !== tab;
  refresh();
}

function start() {
  $("login").hidden = true;
  $("tabs").hidden = false;
  $("logout").hidden = false;
  loadKeyNames().catch(() => {});
  show(current);
  clearInterval(timer);
  timer = setInterval(() => { if (current !== "keys" && !document.hidden) refresh(); }, 2000);
}

function logout() {
  sessionStorage.removeItem(KEY);
  clearInterval(timer);
  for (const s of document.querySelectorAll(".tab")) s.hidden = true;
  $("tabs").hidden = true;
  $("logout").hidden = true;
  $("login").hidden = false;
}

$("login-form").addEventListener("submit", async (e) => {
  e.preventDefault();
  sessionStorage.setItem(KEY, $("admin-key").value.trim());
  $("admin-key").value = "";
  try {
    await api("/admin/models");
    $("login-error").textContent = "";
    start();
  } catch (err) {
    $("login-error").textContent = err.message;
    logout();
  }
});
$("logout").addEventListener("click", logout);
$("key-form").addEventListener("submit", (e) => createKey(e).catch((err) => toast(err.message)));
$("usage-range").addEventListener("change", refresh);
$("usage-by").addEventListener("change", refresh);
for (const b of document.querySelectorAll("#tabs button")) b.addEventListener("click", () => show(b.dataset.tab));
if (sessionStorage.getItem(KEY)) api("/admin/models").then(start).catch(logout);
