import threading

from launchpad.agent.preemption import PreemptionWatcher, aws_notice, azure_notice, gcp_notice

from .metadata_double import MetadataDouble


def test_aws_imdsv2_notice():
    with MetadataDouble() as md:
        assert aws_notice(md.url) is None
        md.notice = True
        notice = aws_notice(md.url)
        assert notice.startswith("spot interruption notice: terminate")
        assert md.requests[0] == "PUT /latest/api/token"  # IMDSv2: a session token first


def test_aws_endpoint_from_the_environment(monkeypatch):
    with MetadataDouble() as md:
        monkeypatch.setenv("AWS_EC2_METADATA_SERVICE_ENDPOINT", md.url)
        md.notice = True
        assert aws_notice() is not None


def test_gcp_preempted_flag():
    with MetadataDouble() as md:
        assert gcp_notice(md.url) is None
        md.notice = True
        assert gcp_notice(md.url) == "preemption notice (GCP)"


def test_azure_scheduled_events_preempt_is_a_notice():
    with MetadataDouble() as md:
        assert azure_notice(md.url) is None  # only a Freeze event is scheduled
        md.notice = True
        assert azure_notice(md.url).startswith("spot eviction notice (Azure): not before Mon, 19 Sep 2026")
        assert md.requests[-1] == "GET /metadata/scheduledevents?api-version=2020-07-01"


def test_azure_endpoint_from_the_environment(monkeypatch):
    with MetadataDouble() as md:
        monkeypatch.setenv("LAUNCHPAD_AZURE_IMDS", md.url)
        md.notice = True
        seen, done = [], threading.Event()
        watcher = PreemptionWatcher(["azure"], lambda r: (seen.append(r), done.set()), interval=0.05, log=lambda m: None)
        watcher.start()
        try:
            assert done.wait(5)
        finally:
            watcher.stop()
        assert len(seen) == 1 and "Azure" in seen[0]


def test_watcher_calls_back_once():
    with MetadataDouble() as md:
        seen, done = [], threading.Event()
        watcher = PreemptionWatcher(["aws"], lambda r: (seen.append(r), done.set()), interval=0.05, log=lambda m: None)
        import os

        os.environ["AWS_EC2_METADATA_SERVICE_ENDPOINT"] = md.url
        try:
            watcher.start()
            md.notice = True
            assert done.wait(5)
        finally:
            os.environ.pop("AWS_EC2_METADATA_SERVICE_ENDPOINT")
            watcher.stop()
        assert len(seen) == 1
