// airlockd's status page: asks for the admin key (kept in this tab's sessionStorage, sent as
// the X-API-Key header, never in a URL), then reads the admin JSON routes every few seconds
// and fills the tables. Every value is put in the page as text (never as HTML): commands and
// names come from tenants.
"use strict";

(function () {
  const KEY_NAME = "airlock-admin-key";
  const REFRESH_MS = 3000;
  const $ = (id) => document.getElementById(id);
  let timer = null;
  let generation = 0; // a refresh started before a sign-out is ignored when it ends

  // ---- formatting ----------------------------------------------------------------------
  function bytes(n) {
    if (n === null || n === undefined) return "–";
    const units = ["B", "KB", "MB", "GB", "TB"];
    let u = 0;
    while (n >= 1024 && u < units.length - 1) { n /= 1024; u++; }
    return (u === 0 ? n.toFixed(0) : n.toFixed(1)) + " " + units[u];
  }
  function duration(s) {
    if (s === null || s === undefined || isNaN(s)) return "–";
    if (s < 1) return Math.round(s * 1000) + " ms";
    if (s < 60) return s.toFixed(1) + " s";
    if (s < 3600) return Math.floor(s / 60) + " min " + Math.floor(s % 60) + " s";
    return Math.floor(s / 3600) + " h " + Math.floor((s % 3600) / 60) + " min";
  }
  function time(epoch) {
    if (!epoch) return "–";
    return new Date(epoch * 1000).toLocaleTimeString();
  }
  function num(v) { return v === null || v === undefined ? "–" : String(v); }

  // ---- building rows (text only) ---------------------------------------------------------
  function cell(text, cls) {
    const td = document.createElement("td");
    td.textContent = text;
    if (cls) td.className = cls;
    return td;
  }
  function row(cells, attrs) {
    const tr = document.createElement("tr");
    for (const c of cells) tr.appendChild(typeof c === "string" ? cell(c) : c);
    for (const k in attrs || {}) tr.setAttribute(k, attrs[k]);
    return tr;
  }
  function fill(tableId, rows, emptyText) {
    const body = $(tableId).tBodies[0];
    const cols = $(tableId).tHead.rows[0].cells.length;
    if (rows.length === 0) {
      const td = cell(emptyText, "empty");
      td.colSpan = cols;
      rows = [row([td])];
    }
    body.replaceChildren(...rows);
  }
  function note(id, text, stale) {
    const p = $(id);
    p.hidden = !text;
    p.textContent = text || "";
    p.classList.toggle("stale", !!stale);
  }
  function stateCell(state, text) { return cell(text || state || "–", "state-" + (state || "none")); }
  function bar(used, of) {
    const td = document.createElement("td");
    if (!of) return td;
    const outer = document.createElement("div");
    outer.className = "bar" + (used / of > 0.9 ? " high" : "");
    const inner = document.createElement("span");
    inner.style.width = Math.min(100, Math.round((100 * used) / of)) + "%"; // CSSOM: allowed by the CSP
    outer.appendChild(inner);
    td.appendChild(outer);
    return td;
  }

  // ---- the admin API -----------------------------------------------------------------------
  // {status, json} of one GET; a network failure is status 0.
  async function get(path, key) {
    try {
      const res = await fetch(path, { headers: { "X-API-Key": key }, cache: "no-store", credentials: "omit" });
      let json = null;
      try { json = await res.json(); } catch (e) { json = null; }
      return { status: res.status, json: json };
    } catch (e) {
      return { status: 0, json: null };
    }
  }
  function detail(r) {
    if (r.status === 0) return "the server cannot be reached";
    const d = r.json && r.json.detail;
    return (typeof d === "string" ? d : "HTTP " + r.status);
  }

  // ---- each view -------------------------------------------------------------------------------
  function showBudgets(st, sessions) {
    if (st.status !== 200) {
      note("budgets-note", "Budgets unavailable: " + detail(st));
      fill("budgets", [], "–");
      fill("tenants", [], "–");
      return;
    }
    const b = st.json.budgets;
    const rows = [
      row(["Sessions", num(b.sessions.open), b.sessions.max === null ? "no cap" : num(b.sessions.max),
        bar(b.sessions.open, b.sessions.max)], { "data-budget": "sessions" }),
      row(["Commands running", num(b.commands.running), num(b.commands.max), bar(b.commands.running, b.commands.max)],
        { "data-budget": "commands" }),
      row(["Workspace disks", bytes(b.disk.used_bytes), bytes(b.disk.total_bytes), bar(b.disk.used_bytes, b.disk.total_bytes)],
        { "data-budget": "disk" }),
    ];
    const host = b.host_memory;
    if (host && host.total_bytes !== null && host.available_bytes !== null) {
      const used = host.total_bytes - host.available_bytes;
      rows.push(row(["Host memory in use", bytes(used), bytes(host.total_bytes), bar(used, host.total_bytes)],
        { "data-budget": "host-memory" }));
    }
    if (sessions && sessions.status === 200) {
      // the sessions this server holds (a fleet's others are measured on their own nodes)
      let now = 0, limit = 0;
      for (const s of sessions.json.sessions) {
        if (s.live === false) continue;
        now += s.memory_bytes || 0;
        limit += s.memory_limit_bytes || (s.memory_mb || 0) * 1024 * 1024;
      }
      rows.push(row(["Memory of the sessions here", bytes(now), limit ? bytes(limit) + " (their limits)" : "–", bar(now, limit)],
        { "data-budget": "memory" }));
    }
    note("budgets-note", "Isolation: " + st.json.isolation + "; idle sessions end after " + duration(st.json.session_ttl_s) + ".");
    fill("budgets", rows, "–");
    fill("tenants", st.json.tenants.map((t) => row([t.tenant, num(t.sessions_open), num(t.max_sessions),
      num(t.commands_running), num(t.max_concurrent_exec), num(t.requests_per_minute)],
      { "data-tenant": t.tenant })), "No tenant has sessions here.");
  }

  function showNodes(r) {
    if (r.status === 404) {
      note("nodes-note", "This server runs alone (no fleet).");
      fill("nodes", [], "One server, no fleet.");
      return;
    }
    if (r.status !== 200) {
      note("nodes-note", "Nodes unavailable: " + detail(r), true);
      return; // the last rows stay
    }
    note("nodes-note", r.json.stale ? "The fleet's database cannot be reached: node " + r.json.node +
      "'s last view, as of " + time(r.json.as_of) + "." : "Seen by node " + r.json.node + ".", r.json.stale);
    fill("nodes", r.json.nodes.map((n) => row([n.id, n.slot, stateCell(n.state),
      cell(duration(n.heartbeat_age_s) + " ago", "num"), cell(num(n.load), "num"),
      cell(n.capacity ? num(n.capacity) : "no cap", "num"), cell(num(n.sessions), "num"),
      cell(num(n.commands_running), "num"), n.url], { "data-node": n.id })), "No node registered.");
  }

  function showSessions(r) {
    if (r.status !== 200) {
      note("sessions-note", r.status === 404 ? "This server does not list sessions to the admin key."
        : "Sessions unavailable: " + detail(r), true);
      note("running-note", "Running commands unavailable.", true);
      return;
    }
    const list = r.json.sessions.slice().sort((a, b) =>
      a.tenant < b.tenant ? -1 : a.tenant > b.tenant ? 1 : a.created_at - b.created_at);
    const rows = [], running = [], count = new Map();
    for (const s of list) count.set(s.tenant, (count.get(s.tenant) || 0) + 1);
    let tenant = null;
    const cols = $("sessions").tHead.rows[0].cells.length;
    for (const s of list) {
      if (s.tenant !== tenant) {
        tenant = s.tenant;
        const th = document.createElement("th");
        th.colSpan = cols;
        th.textContent = "Tenant " + tenant + " (" + count.get(tenant) + ")";
        const tr = document.createElement("tr");
        tr.className = "group";
        tr.appendChild(th);
        rows.push(tr);
      }
      const last = s.last_command;
      const where = s.state === "elsewhere" ? "on " + s.node : s.state;
      rows.push(row([s.id, num(s.node), stateCell(s.state, where), num(s.template), cell(duration(s.age_s), "num"),
        cell(s.cpu_seconds === null || s.cpu_seconds === undefined ? "–" : s.cpu_seconds.toFixed(2) + " s", "num"),
        cell(bytes(s.memory_bytes) + " (" + bytes(s.memory_peak_bytes) + ") of " +
          (s.memory_limit_bytes ? bytes(s.memory_limit_bytes) : s.memory_mb ? s.memory_mb + " MB" : "–"), "num"),
        cell(bytes(s.disk_used_bytes) + " of " + bytes(s.disk_quota_bytes), "num"),
        cell(num(s.processes), "num"), cell(num(s.commands_run), "num"),
        cell(last ? (last.command || "") + (typeof last.exit_code === "number" ? " → " + last.exit_code : "") : "–", "cmd")],
        { "data-session-id": s.id, "data-tenant": s.tenant }));
      for (const c of s.running || []) {
        running.push(row([s.id, s.tenant, num(s.node), cell(duration(Date.now() / 1000 - c.started_at), "num"),
          cell(c.command, "cmd")], { "data-session-id": s.id }));
      }
    }
    const down = r.json.database === "unreachable";
    note("sessions-note", down ? "The fleet's database cannot be reached: node " + r.json.node + "'s sessions only." :
      r.json.node ? "Live figures are those of node " + r.json.node + "'s sessions; the others' are measured on their nodes." : "",
      down);
    note("running-note", "");
    fill("sessions", rows, "No session is open.");
    fill("running", running, "No command is running.");
  }

  function scopeNote(id, r, what) {
    if (r.status !== 200) {
      note(id, what + " unavailable: " + detail(r), r.status !== 501);
      return false;
    }
    note(id, r.json.stale ? "The fleet's database cannot be reached: node " + r.json.node + "'s own records only." : "",
      r.json.stale);
    return true;
  }

  function showEgress(r) {
    if (!scopeNote("egress-note", r, "Egress denials")) return;
    fill("egress", r.json.denials.map((e) => row([time(e.ts), e.session_id || "–", e.tenant || "–",
      e.host ? e.host + ":" + e.port : (e.target || "–"), e.reason || "–"])), "No denied attempt (of live sessions).");
  }

  function showAudit(r) {
    if (!scopeNote("audit-note", r, "The audit log")) {
      if (r.status === 501) fill("audit", [], "The audit log is off (SANDBOX_AUDIT).");
      return;
    }
    fill("audit", r.json.entries.map((e) => row([time(e.ts), e.tenant_id, num(e.session_id), num(e.kind),
      cell(e.timed_out ? "timed out" : e.oom_killed ? "out of memory" : num(e.exit_code), "num"),
      cell(duration(e.duration_s), "num"), cell(e.command || e.detail || "", "cmd")])), "No audit row yet.");
  }

  // ---- the refresh loop and the key ---------------------------------------------------------
  function signOut(message) {
    generation++;
    clearTimeout(timer);
    timer = null;
    sessionStorage.removeItem(KEY_NAME);
    $("status").hidden = true;
    $("logout").hidden = true;
    $("login").hidden = false;
    $("where").textContent = "";
    $("updated").textContent = "";
    const err = $("login-error");
    err.hidden = !message;
    err.textContent = message || "";
    $("key").value = "";
    $("key").focus();
  }

  async function refresh() {
    const key = sessionStorage.getItem(KEY_NAME);
    if (!key) return signOut("");
    const mine = ++generation;
    const st = await get("/v1/admin/status", key);
    if (mine !== generation) return;
    // nodes only in a fleet (one server answers 404: no request made for nothing)
    const alone = st.status === 200 && !st.json.fleet;
    const [nodes, sessions, egress, audit] = await Promise.all([
      alone ? { status: 404, json: null } : get("/v1/admin/nodes", key), get("/v1/admin/sessions", key),
      get("/v1/admin/egress?limit=20", key), get("/v1/admin/audit?limit=20", key)]);
    if (mine !== generation) return;
    // the admin routes answer 401 for a wrong key and 404 while the admin API is off
    if (st.status === 401 || (st.status === 404 && !(st.json && st.json.budgets)))
      return signOut("Refused: " + detail(st) + (st.status === 401 ? " (HTTP 401). Check the key and try again." : ""));
    $("login").hidden = true;
    $("status").hidden = false;
    $("logout").hidden = false;
    if (st.status === 200) {
      $("where").textContent = st.json.node ? "fleet node " + st.json.node : "one server";
      const down = st.json.database_reachable === false;
      $("banner").hidden = !down;
      $("banner").textContent = down ? "The fleet's database cannot be reached: this page shows what node " +
        st.json.node + " knows, marked as such." : "";
    } else {
      $("banner").hidden = false;
      $("banner").textContent = "The server did not answer: " + detail(st) + ". Retrying.";
    }
    showBudgets(st, sessions);
    showNodes(nodes);
    showSessions(sessions);
    showEgress(egress);
    showAudit(audit);
    $("updated").textContent = "updated " + new Date().toLocaleTimeString();
    document.body.setAttribute("data-refreshed", String(Date.now()));
    timer = setTimeout(refresh, REFRESH_MS);
  }

  document.addEventListener("DOMContentLoaded", function () {
    $("login-form").addEventListener("submit", function (ev) {
      ev.preventDefault(); // the key never goes into a URL or a form submission
      const key = $("key").value.trim();
      if (!key) return;
      sessionStorage.setItem(KEY_NAME, key);
      $("key").value = "";
      $("login-error").hidden = true;
      clearTimeout(timer);
      refresh();
    });
    $("logout").addEventListener("click", function () { signOut(""); });
    if (sessionStorage.getItem(KEY_NAME)) refresh();
    else signOut("");
  });
})();
