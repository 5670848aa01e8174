"""The on-demand pod's Kubernetes Job, made from the chart's template: named for its job, labelled (Kueue when a
queue is set, created suspended for it to admit), one try, the pod's follower id and one-job exit given by the leader
(an id the template carried is replaced, never doubled); and a Job's end read from its conditions."""

from __future__ import annotations

import copy

from leader.placement.ondemand import KUEUE_LABEL, LABEL_JOB, LABEL_MANAGED, failure, job_manifest

TEMPLATE = {
    "apiVersion": "batch/v1",
    "kind": "Job",
    "metadata": {"labels": {"app.kubernetes.io/component": "follower"}},
    "spec": {
        "template": {
            "metadata": {"labels": {"app.kubernetes.io/component": "follower"}},
            "spec": {
                "containers": [
                    {
                        "name": "follower",
                        "image": "benchfleet-follower:1",
                        "env": [
                            {"name": "BENCHFLEET_FOLLOWER_FOLLOWER_ID", "value": "stale"},
                            {"name": "BENCHFLEET_FOLLOWER_WORK_DIR", "value": "/work"},
                        ],
                    }
                ]
            },
        }
    },
}


def test_a_jobs_manifest_names_labels_and_configures_its_pod() -> None:
    before = copy.deepcopy(TEMPLATE)
    job_id = "0123456789abcdef0123456789abcdef"
    manifest = job_manifest(TEMPLATE, job_id=job_id, queue=None)
    assert before == TEMPLATE  # the template is copied, never changed
    assert manifest["metadata"]["name"] == "bf-run-0123456789ab"
    assert manifest["metadata"]["labels"] == {
        "app.kubernetes.io/component": "follower",
        LABEL_JOB: job_id,
        LABEL_MANAGED: "benchfleet-leader",
    }
    assert manifest["spec"]["backoffLimit"] == 0 and "suspend" not in manifest["spec"]
    pod = manifest["spec"]["template"]
    assert pod["metadata"]["labels"][LABEL_JOB] == job_id and pod["spec"]["restartPolicy"] == "Never"
    env = {e["name"]: e["value"] for e in pod["spec"]["containers"][0]["env"]}
    assert env == {
        "BENCHFLEET_FOLLOWER_WORK_DIR": "/work",
        "BENCHFLEET_FOLLOWER_FOLLOWER_ID": "bf-run-0123456789ab",
        "BENCHFLEET_FOLLOWER_EXIT_AFTER_JOB": "true",
    }
    queued = job_manifest(TEMPLATE, job_id=job_id, queue="team-a")
    assert queued["metadata"]["labels"][KUEUE_LABEL] == "team-a" and queued["spec"]["suspend"] is True


def test_a_jobs_end_is_read_from_its_conditions() -> None:
    assert failure({"status": {}}) is None
    assert failure({"status": {"conditions": [{"type": "Failed", "status": "False"}]}}) is None
    failed = {"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded", "message": "Job has reached the limit"}
    assert failure({"status": {"conditions": [failed]}}) == "BackoffLimitExceeded: Job has reached the limit"
    assert failure({"status": {"conditions": [{"type": "Complete", "status": "True"}]}}) == "the pod exited before its job ended"
