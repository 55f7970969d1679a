// the-loop's dashboard: live updates (server-sent events), actions (JSON POSTs with the login's CSRF token) and
// the browser terminal (xterm.js over a WebSocket). Data is only ever put into the page as text, never as HTML.
"use strict";

(function () {
  const meta = (name) => (document.querySelector(`meta[name="${name}"]`) || {}).content || "";
  const page = meta("page");

  function post(path, body) {
    return fetch(path, {
      method: "POST",
      credentials: "same-origin",
      headers: { "content-type": "application/json", "x-csrf-token": meta("csrf-token") },
      body: JSON.stringify(body || {}),
    }).then((response) => response.json().then((data) => ({ status: response.status, data })));
  }

  function cell(text, className) {
    const td = document.createElement("td");
    td.textContent = text || "";
    if (className) td.className = className;
    return td;
  }

  function badge(text, className) {
    const span = document.createElement("span");
    span.className = `badge ${className}`;
    span.textContent = text;
    return span;
  }

  function modelText(item) {
    return item.effort ? `${item.model || ""} (${item.effort})` : item.model || "";
  }

  // ------------------------------------------------------------------------------------------ login

  function login() {
    const error = document.getElementById("login-error");
    // One login for the form and the link: on success to the list, else the refusal in words.
    const attempt = (body, refused) =>
      fetch("/login", {
        method: "POST",
        credentials: "same-origin",
        headers: { "content-type": "application/json" },
        body: JSON.stringify(body),
      }).then((response) => {
        if (response.ok) return location.assign("/");
        error.hidden = false;
        error.textContent = response.status === 429 ? "Too many failed logins: wait a minute." : refused;
      });
    if (location.hash.startsWith("#link=")) {
      const link = location.hash.slice("#link=".length);
      history.replaceState(null, "", location.pathname); // the secret leaves the address bar at once
      attempt({ link }, "That link was used or has expired: ask for another (the-loop web open).");
    }
    const form = document.getElementById("login");
    form.addEventListener("submit", (event) => {
      event.preventDefault();
      attempt({ token: form.elements.token.value }, "Login refused.");
    });
  }

  // ------------------------------------------------------------------------------------------ the list

  function renderRows(items) {
    const body = document.querySelector("#items tbody");
    const rows = items.map((item) => {
      const tr = document.createElement("tr");
      tr.dataset.ref = item.ref;
      const link = document.createElement("a");
      link.href = `/work-items/${encodeURIComponent(item.ref)}`;
      link.textContent = item.ref;
      const first = document.createElement("td");
      first.appendChild(link);
      const badges = document.createElement("td");
      if (item.waiting) badges.appendChild(badge("waiting for input", "waiting"));
      if (item.stale) badges.appendChild(badge("stale", "stale"));
      tr.append(first, cell(item.state, `state ${item.state}`), cell(item.harness), cell(modelText(item)),
        cell(item.lastActivity), badges);
      return tr;
    });
    body.replaceChildren(...rows);
    const count = document.querySelector("h1 .count");
    if (count) count.textContent = String(items.length);
  }

  function debounced(action, wait) {
    let timer = null;
    return () => {
      clearTimeout(timer);
      timer = setTimeout(action, wait);
    };
  }

  function list() {
    const refresh = debounced(() => {
      fetch("/api/v1/work-items?limit=500", { credentials: "same-origin" })
        .then((response) => response.json())
        .then((found) => renderRows(found.items));
    }, 300);
    const stream = new EventSource("/api/v1/events/stream");
    stream.onmessage = refresh; // any event may change a row: fetch the list again (debounced)
    stream.addEventListener("desync", () => location.reload());
  }

  // ------------------------------------------------------------------------------------------ one item

  function timelineEntry(record) {
    const li = document.createElement("li");
    const time = document.createElement("time");
    time.textContent = record.ts || "";
    const name = document.createElement("span");
    name.className = "event";
    name.textContent = record.event || "";
    const detail = document.createElement("span");
    detail.className = "detail";
    const fields = ["effect", "command", "reason", "actor", "delivery_id", "tmux_target", "principal", "status"];
    detail.textContent = fields.filter((key) => record[key] !== undefined && record[key] !== "")
      .map((key) => `${key}=${record[key]}`).join(" ");
    li.append(time, " ", name, " ", detail);
    return li;
  }

  function workItem() {
    const ref = meta("ref");
    const base = `/api/v1/work-items/${encodeURIComponent(ref)}`;
    const result = document.getElementById("action-result");
    const show = (answer) => {
      if (result) result.textContent = (answer.data && (answer.data.message || answer.data.error)) || "";
    };

    const timeline = document.getElementById("timeline");
    const stream = new EventSource(`/api/v1/events/stream?workItem=${encodeURIComponent(ref)}`);
    stream.onmessage = (message) => timeline.appendChild(timelineEntry(JSON.parse(message.data)));
    stream.addEventListener("desync", () => location.reload());

    const say = document.getElementById("say");
    if (say) {
      say.addEventListener("submit", (event) => {
        event.preventDefault();
        post(`${base}/say`, { text: say.elements.text.value }).then((answer) => {
          show(answer);
          if (answer.status === 200) say.reset();
        });
      });
    }
    const answer = document.getElementById("answer");
    if (answer) {
      answer.addEventListener("submit", (event) => {
        event.preventDefault();
        post(`${base}/answer`, { text: answer.elements.text.value, question: answer.dataset.question }).then((done) => {
          show(done);
          if (done.status === 200) document.getElementById("question").hidden = true;
        });
      });
    }
    for (const button of document.querySelectorAll("button.action")) {
      button.addEventListener("click", () => post(`${base}/${button.dataset.action}`, {}).then(show));
    }
    terminal(base);
  }

  // xterm.js styles itself with <style> elements and style="" attributes, both of which the page's CSP
  // (style-src 'self') forbids. Its <style> elements are mirrored into constructed style sheets and a style
  // attribute becomes style.cssText, two routes the policy allows; so the terminal keeps its colours.
  function fitXtermToPolicy() {
    const setAttribute = Element.prototype.setAttribute;
    Element.prototype.setAttribute = function (name, value) {
      if (String(name).toLowerCase() === "style" && this.style) this.style.cssText = String(value);
      else setAttribute.call(this, name, value);
    };
    const appendChild = Node.prototype.appendChild;
    Node.prototype.appendChild = function (node) {
      if (!(node instanceof HTMLStyleElement)) return appendChild.call(this, node);
      const sheet = new CSSStyleSheet();
      const sync = () => sheet.replaceSync(node.textContent || "");
      sync();
      new MutationObserver(sync).observe(node, { childList: true, subtree: true, characterData: true });
      document.adoptedStyleSheets = [...document.adoptedStyleSheets, sheet];
      return node;
    };
  }

  function terminal(base) {
    const element = document.getElementById("terminal");
    if (!element || typeof window.Terminal !== "function") return;
    fitXtermToPolicy();
    const term = new window.Terminal({ convertEol: false, cursorBlink: true, fontSize: 13, scrollback: 2000 });
    const fit = new window.FitAddon.FitAddon();
    term.loadAddon(fit);
    term.open(element);
    fit.fit();
    const scheme = location.protocol === "https:" ? "wss:" : "ws:";
    const socket = new WebSocket(`${scheme}//${location.host}${base}/terminal`);
    socket.binaryType = "arraybuffer";
    const resize = () => {
      if (socket.readyState === WebSocket.OPEN) {
        socket.send(JSON.stringify({ type: "resize", cols: term.cols, rows: term.rows }));
      }
    };
    socket.addEventListener("open", resize);
    socket.addEventListener("message", (event) => {
      term.write(typeof event.data === "string" ? event.data : new Uint8Array(event.data));
    });
    socket.addEventListener("close", () => term.write("\r\n[the terminal was closed]\r\n"));
    const encoder = new TextEncoder();
    term.onData((data) => {
      if (socket.readyState === WebSocket.OPEN) socket.send(encoder.encode(data));
    });
    window.addEventListener("resize", () => {
      fit.fit();
      resize();
    });
    window.theLoopTerminal = term; // for the tests: what the screen shows
  }

  // ------------------------------------------------------------------------------------------ start

  document.addEventListener("DOMContentLoaded", () => {
    const logout = document.getElementById("logout");
    if (logout) logout.addEventListener("click", () => post("/logout").then(() => location.assign("/login")));
    if (page === "login") login();
    else if (page === "list") list();
    else if (page === "work-item") workItem();
  });
})();
