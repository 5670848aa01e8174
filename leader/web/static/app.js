// Live progress on the job page: poll the job and its per-window progress while it runs.
// A leader without the progress endpoint answers 404: a note is shown instead.
(function () {
  const box = document.getElementById("live");
  if (!box) return;
  const jobId = box.dataset.job;
  const terminal = new Set(["succeeded", "failed", "cancelled"]);
  const state = document.getElementById("live-state");
  const metrics = document.getElementById("live-metrics");
  async function tick() {
    try {
      const job = await fetch(`/api/v1/jobs/${jobId}`, {credentials: "same-origin"});
      if (job.ok) {
        const j = await job.json();
        state.textContent = `${j.state} — ${j.points_done}/${j.points_total} points`;
        document.getElementById("job-state").textContent = j.state;  // one state on the page, the live one
        if (terminal.has(j.state)) { location.reload(); return; }
        // A job that waits says why (and what would unblock it) once, above; not "waiting for the first window".
        const waiting = j.waiting_reason && (j.state === "queued" || j.state === "assigned") ? j.waiting_reason : "";
        document.getElementById("job-waiting").hidden = !waiting;
        document.getElementById("waiting-reason").textContent = waiting;
        if (waiting) { metrics.textContent = ""; setTimeout(tick, 1000); return; }
      }
      const progress = await fetch(`/api/v1/jobs/${jobId}/progress`, {credentials: "same-origin"});
      if (progress.status === 404) {
        metrics.textContent = "live per-window metrics are not available from this leader";
      } else if (progress.ok) {
        const p = await progress.json();
        // JobProgress: points[].windows[] (WindowStat); show the newest window of the newest point.
        const points = Array.isArray(p.points) ? p.points : [];
        const point = points[points.length - 1] || {};
        const windows = Array.isArray(point.windows) ? point.windows : [];
        const last = windows[windows.length - 1] || {};
        if (!windows.length) { metrics.textContent = "waiting for the first window…"; setTimeout(tick, 1000); return; }
        const fmt = (v, unit) => (v === null || v === undefined) ? "—" : `${Number(v).toFixed(1)} ${unit}`;
        const tokens = (last.tokens_per_s === null || last.tokens_per_s === undefined) ? "" :
          ` · ${fmt(last.tokens_per_s, "tokens/s")} · TTFT p99 ${fmt(last.ttft_p99_ms, "ms")}`;
        metrics.textContent = `point ${point.index}: rate ${fmt(last.throughput, "req/s")} · p99 ${fmt(last.p99_ms, "ms")}` +
          `${tokens} · GPU ${fmt(last.gpu_util_percent, "%")}`;
      }
    } catch (e) {
      metrics.textContent = "leader unreachable; retrying";
    }
    setTimeout(tick, 1000);
  }
  tick();
})();
