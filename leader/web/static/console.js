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
      if (!confirm(`Cancel job ${el.dataset.job}? A running point stops where it is.`)) return;
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
    async trust(el) {
      const body = JSON.stringify({trusted: el.dataset.trusted === "true"});
      const answer = await api("PATCH", `/api/v1/models/${el.dataset.name}/${el.dataset.version}`, body, "application/json");
      if (!answer.ok) throw new Error(await refused(answer));
      location.reload();
    },
    async "delete-model"(el) {
      if (!confirm(`Delete model ${el.dataset.name}:${el.dataset.version}?`)) return;
      const answer = await api("DELETE", `/api/v1/models/${el.dataset.name}/${el.dataset.version}`);
      if (!answer.ok) throw new Error(await refused(answer));
      location.reload();
    },
    async "delete-data"(el) {
      if (!confirm(`Delete data set ${el.dataset.id}?`)) return;
      const answer = await api("DELETE", `/api/v1/data/${el.dataset.id}`);
      if (!answer.ok) throw new Error(await refused(answer));
      location.reload();
    },
    async approve(el) {
      const answer = await api("POST", `/api/v1/followers/${el.dataset.follower}/approve`);
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

  // Uploads: the form's fields as the API's multipart body; a refusal is shown in the form, its field marked.
  document.querySelectorAll("form[data-upload]").forEach((form) => {
    form.addEventListener("submit", async (event) => {
      event.preventDefault();
      const box = form.querySelector(".form-error");
      form.querySelectorAll("[aria-invalid]").forEach((el) => el.removeAttribute("aria-invalid"));
      box.hidden = true;
      const data = new FormData(form);
      for (const [key, value] of Array.from(data.entries())) if (value === "") data.delete(key);
      const button = form.querySelector("button[type=submit]");
      button.disabled = true;
      try {
        const answer = await fetch(form.dataset.upload, {method: "POST", body: data, headers: {"X-CSRF-Token": csrf},
                                                          credentials: "same-origin"});
        // A form naming `data-open` opens the page of what it made (an import: its job); the others show it in place.
        if (answer.ok && form.dataset.open) { location.assign(`/jobs/${(await answer.json())[form.dataset.open]}`); return; }
        if (answer.ok) { location.reload(); return; }
        let field = "";
        box.textContent = await refused(answer.clone());
        try { field = (await answer.json()).field || ""; } catch (e) { /* not JSON */ }
        const input = field && form.querySelector(`[name="${CSS.escape(field)}"]`);
        if (input) input.setAttribute("aria-invalid", "true");
        box.dataset.field = field;
        box.hidden = false;
      } finally {
        button.disabled = false;
      }
    });
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
