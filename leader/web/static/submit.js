// The submit page: the YAML is checked by the leader as the user types (POST /api/v1/jobs/preview, the submission's
// own checks), the field it names is highlighted in the field list, and Submit posts it and opens the job's page.
(function () {
  const area = document.getElementById("spec");
  if (!area) return;
  const csrf = (document.querySelector('meta[name="csrf-token"]') || {}).content || "";
  const status = document.getElementById("spec-status");
  const button = document.getElementById("submit-job");
  const templates = JSON.parse(document.getElementById("templates").textContent);
  let timer = null;
  let asked = 0;

  function flag(field) {
    document.querySelectorAll("#field-docs .flagged").forEach((el) => el.classList.remove("flagged"));
    if (!field) return;
    // The field itself, else its closest section (load.rate.2 is load.rate's; llm.output_tokens.upper is in llm).
    let path = field.replace(/\.\d+(?=\.|$)/g, "");
    while (path) {
      const found = document.querySelectorAll(`#field-docs [data-field="${CSS.escape(path)}"]`);
      if (found.length) {
        found.forEach((el) => el.classList.add("flagged"));
        const list = found[0].closest("aside");
        if (list) list.scrollTop = Math.max(0, found[0].offsetTop - 40);
        return;
      }
      path = path.includes(".") ? path.slice(0, path.lastIndexOf(".")) : "";
    }
  }

  function show(kind, text, field) {
    status.className = `card ${kind}`;
    status.textContent = text;
    status.dataset.field = field || "";
    area.setAttribute("aria-invalid", kind === "err" ? "true" : "false");
    flag(field);
  }

  async function post(path) {
    return fetch(path, {
      method: "POST", body: area.value, credentials: "same-origin",
      headers: {"Content-Type": "application/yaml", "X-CSRF-Token": csrf},
    });
  }

  async function problem(answer) {
    try {
      const body = await answer.json();
      const named = !body.field || String(body.message).includes(body.field);
      return [named ? body.message : `${body.message} (${body.field})`, body.field];
    } catch (e) {
      return [`the leader answered ${answer.status}`, ""];
    }
  }

  async function check() {
    const mine = ++asked;
    const answer = await post("/api/v1/jobs/preview");
    if (mine !== asked) return;  // a later edit's check is on its way
    if (answer.ok) {
      const p = await answer.json();
      const where = p.follower_id === null ? `it would wait: ${p.waiting_reason}` :
        `it would run on follower ${p.follower_id}` + (p.jobs_ahead ? ` after ${p.jobs_ahead} job(s), starting in about ${Math.round(p.start_in_s)} s` : " at once");
      show("ok", `valid: ${p.points} point(s), about ${Math.round(p.estimate_s)} s; ${where}`, "");
    } else {
      const [text, field] = await problem(answer);
      show("err", text, field);
    }
  }

  area.addEventListener("input", () => { clearTimeout(timer); timer = setTimeout(() => check().catch(() => {}), 300); });
  document.getElementById("template").addEventListener("change", (event) => {
    if (templates[event.target.value]) { area.value = templates[event.target.value]; check(); }
  });
  button.addEventListener("click", async () => {
    button.disabled = true;
    try {
      const answer = await post("/api/v1/jobs");
      if (answer.status === 201) { location.assign(`/jobs/${(await answer.json()).id}`); return; }
      const [text, field] = await problem(answer);
      show("err", text, field);
    } finally {
      button.disabled = false;
    }
  });
  check();
})();
