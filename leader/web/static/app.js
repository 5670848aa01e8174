// Live progress on the job page: poll the job and its per-window progress while it runs.
// The progress endpoint arrives with the measurement issue; a 404 shows a note instead.
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
        if (terminal.has(j.state)) { location.reload(); return; }
      }
      const progress = await fetch(`/api/v1/jobs/${jobId}/progress`, {credentials: "same-origin"});
      if (progress.status === 404) {
        metrics.textContent = "live per-window metrics are not available from this leader";
      } else if (progress.ok) {
        const p = await progress.json();
        const windows = Array.isArray(p.windows) ? p.windows : (Array.isArray(p) ? p : [p]);
        const last = windows[windows.length - 1] || {};
        const fmt = (v, unit) => (v === null || v === undefined) ? "—" : `${Number(v).toFixed(1)} ${unit}`;
        metrics.textContent = `rate ${fmt(last.throughput, "req/s")} · p99 ${fmt(last.p99_ms, "ms")} · ` +
          `GPU ${fmt(last.gpu_util_percent ?? last.gpu_util, "%")}`;
      }
    } catch (e) {
      metrics.textContent = "leader unreachable; retrying";
    }
    setTimeout(tick, 1000);
  }
  tick();
})();
