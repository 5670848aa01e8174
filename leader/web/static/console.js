// The console's actions: the API's own routes, called with the session's CSRF token (the page's csrf-token meta);
// a refusal is shown with the API's message. And the jobs list refreshing itself while the page is visible.
(function () {
  const csrf = (document.querySelector('meta[name="csrf-token"]') || {}).content || "";
  const errorBox = document.getElementById("console-error");

  function showError(text) {
    if (!errorBox) return;
    errorBox.textContent = text;
    errorBox.hidden = !text;
  }

  async function refused(answer) {
    let message = `${answer.status}`;
    try {
      const body = await answer.json();
      message = body.field ? `${body.message} (${body.field})` : body.message;
    } catch (e) { /* not JSON: the status says it */ }
    return message;
  }

  async function api(method, path, body, contentType) {
    const headers = {"X-CSRF-Token": csrf};
    if (contentType) headers["Content-Type"] = contentType;
    return fetch(path, {method, headers, body, credentials: "same-origin"});
  }

  async function specYaml(jobId) {
    const answer = await fetch(`/jobs/${jobId}/spec.yaml`, {credentials: "same-origin"});
    if (!answer.ok) throw new Error(await refused(answer));
    return answer.text();
  }

  const actions = {
    async cancel(el) {
      const answer = await api("POST", `/api/v1/jobs/${el.dataset.job}/cancel`);
      if (!answer.ok) throw new Error(await refused(answer));
      if (table) await refresh(); else location.reload();
    },
    async rerun(el) {
      const answer = await api("POST", "/api/v1/jobs", await specYaml(el.dataset.job), "application/yaml");
      if (!answer.ok) throw new Error(await refused(answer));
      location.assign(`/jobs/${(await answer.json()).id}`);
    },
    async yaml(el) {
      const text = await specYaml(el.dataset.job);
      const dialog = document.getElementById("yaml-dialog");
      const area = document.getElementById("yaml-text");
      area.value = text;
      dialog.showModal();
      area.select();
      if (navigator.clipboard) navigator.clipboard.writeText(text).catch(() => {});
    },
    async drain(el) {
      const answer = await api("POST", `/api/v1/followers/${el.dataset.follower}/drain`);
      if (!answer.ok) throw new Error(await refused(answer));
      location.reload();
    },
    async resume(el) {
      const answer = await api("POST", `/api/v1/followers/${el.dataset.follower}/resume`);
      if (!answer.ok) throw new Error(await refused(answer));
      location.reload();
    },
  };

  document.addEventListener("click", async (event) => {
    const el = event.target.closest("[data-action]");
    if (!el || !actions[el.dataset.action]) return;
    el.disabled = true;
    showError("");
    try {
      await actions[el.dataset.action](el);
    } catch (e) {
      showError(e.message);
    } finally {
      el.disabled = false;
    }
  });

  // The jobs list: its rows again every few seconds, only while the page is visible (a hidden tab asks nothing).
  const table = document.getElementById("jobs");
  const rows = document.getElementById("job-rows");
  async function refresh() {
    if (!table || !rows) return;
    const query = table.dataset.query ? `${table.dataset.query}&fragment=1` : "fragment=1";
    const answer = await fetch(`/jobs?${query}`, {credentials: "same-origin"});
    if (answer.ok) rows.innerHTML = await answer.text();
  }
  let timer = null;
  function schedule() {
    clearInterval(timer);
    timer = document.visibilityState === "visible" && table ? setInterval(() => refresh().catch(() => {}), 3000) : null;
  }
  document.addEventListener("visibilitychange", schedule);
  schedule();
})();
