// The board's only script: append what the server streams (server-sent events).
// The server renders every fragment (escaped); this file only places it.
"use strict";
(function () {
  function nodes(html) {
    const holder = document.createElement("template");
    holder.innerHTML = html;
    return Array.from(holder.content.children);
  }

  const run = document.querySelector("[data-run-live]");
  if (run) {
    const list = document.getElementById("timeline");
    const body = document.getElementById("run-body");
    const status = document.getElementById("live-status");
    const source = new EventSource(run.dataset.runLive);
    source.addEventListener("timeline", function (event) {
      for (const item of nodes(event.data)) {
        // A line sent again after a reconnect is shown once.
        if (!document.getElementById(item.id)) list.appendChild(item);
      }
    });
    source.addEventListener("run", function (event) { body.innerHTML = event.data; });
    const merge = document.getElementById("merge");
    source.addEventListener("merge", function (event) { if (merge) merge.innerHTML = event.data; });
    source.onopen = function () { status.textContent = "live"; };
    source.onerror = function () { status.textContent = "reconnecting…"; };
  }

  // A merge is sent once per page: the button is off as soon as it is pressed (the
  // record also makes one merge of any number of requests).
  document.addEventListener("submit", function (event) {
    const form = event.target;
    if (!form.matches || !form.matches("[data-merge-form]")) return;
    if (form.dataset.sent) { event.preventDefault(); return; }
    form.dataset.sent = "1";
    const button = form.querySelector("button");
    if (button) { button.disabled = true; button.textContent = "Merging…"; }
  });

  const table = document.querySelector("[data-list-live]");
  if (table) {
    let due = null;
    const source = new EventSource(table.dataset.listLive);
    source.addEventListener("changed", function () {
      if (due) return;
      due = setTimeout(async function () {
        due = null;
        const url = new URL(window.location.href);
        url.searchParams.set("fragment", "rows");
        const answer = await fetch(url, { credentials: "same-origin" });
        if (answer.ok) document.getElementById("rows").innerHTML = await answer.text();
      }, 250);
    });
  }
})();
