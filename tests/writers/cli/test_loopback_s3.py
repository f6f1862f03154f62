"""The loopback S3 server of the tests, benchmarks and demo: s3fs through its proxy reaches
moto unchanged (conditional creates included), every request is counted by kind, and faults
injected at a seeded rate behave as on S3: SlowDown / InternalError stored nothing, a lost
reply stored the request, and the clients' retries ride over a few percent of them."""

from __future__ import annotations

import http.client
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import urlsplit

import pytest
import s3fs
from botocore.exceptions import BotoCoreError

from lakebraid.writers.cli.loopback_s3 import LoopbackS3, request_kind

# One attempt per layer (botocore, s3fs), so a fault at rate 1.0 fails at once; aiohttp still
# repeats an idempotent request (PUT, GET, HEAD, DELETE) once after a connection reset.
NO_RETRIES = {"retries": {"total_max_attempts": 1}}


@pytest.fixture
def lb(loopback_s3: LoopbackS3):
    loopback_s3.inject(0)
    yield loopback_s3
    loopback_s3.inject(0)


def filesystem(lb: LoopbackS3, retries: bool = True) -> s3fs.S3FileSystem:
    options = {} if retries else {"config_kwargs": NO_RETRIES}
    fs = s3fs.S3FileSystem(
        **lb.storage_options(), skip_instance_cache=True, use_listings_cache=False, **options
    )
    if not retries:
        fs.retries = 1
    return fs


def test_requests_are_forwarded_and_counted_by_kind(lb: LoopbackS3) -> None:
    fs, bucket = filesystem(lb), lb.new_bucket()
    with lb.counting() as put:
        fs.pipe_file(f"{bucket}/x/a", b"alpha")
    with lb.counting() as get:
        assert fs.cat_file(f"{bucket}/x/a", start=0, end=5) == b"alpha"
    with lb.counting() as cat:  # s3fs asks the size first (HEAD), to split large reads
        assert fs.cat_file(f"{bucket}/x/a") == b"alpha"
    with lb.counting() as listing:
        assert fs.ls(f"{bucket}/x", refresh=True) == [f"{bucket}/x/a"]
    with lb.counting() as delete:
        fs.rm(f"{bucket}/x/a")
    fs.pipe({f"{bucket}/y/1": b"1", f"{bucket}/y/2": b"2"})
    with lb.counting() as bulk_delete:  # one POST ?delete
        fs.rm([f"{bucket}/y/1", f"{bucket}/y/2"])
    assert put.counts == {"PUT": 1} and put.total == 1
    assert get.counts == {"GET": 1}
    assert cat.counts == {"HEAD": 1, "GET": 1} and cat.total == 2
    assert listing.counts == {"LIST": 1}
    assert delete.counts == {"DELETE": 1}
    assert bulk_delete.counts == {"DELETE": 1}
    assert not fs.exists(f"{bucket}/x/a")
    lb.reset_counts()
    assert lb.counts() == {}


def test_request_kinds() -> None:
    assert request_kind("GET", "/b?list-type=2&prefix=x%2F&delimiter=%2F") == "LIST"
    assert request_kind("GET", "/b") == request_kind("GET", "/") == "LIST"
    assert request_kind("GET", "/b/k/l?partNumber=1") == "GET"
    assert request_kind("POST", "/b?delete") == "DELETE"
    assert request_kind("POST", "/b/k?uploads") == "POST"
    assert request_kind("HEAD", "/b/k") == "HEAD"


def test_a_conditional_create_of_an_existing_object_is_refused(lb: LoopbackS3) -> None:
    fs, path = filesystem(lb), f"{lb.new_bucket()}/once"
    with lb.counting() as counting:
        fs.pipe_file(path, b"first", mode="create")
        with pytest.raises(FileExistsError):
            fs.pipe_file(path, b"second", mode="create")
    assert counting.counts == {"PUT": 2}
    assert fs.cat_file(path) == b"first"


def test_a_chunked_request_body_is_forwarded_with_its_framing(lb: LoopbackS3) -> None:
    bucket, url = lb.new_bucket(), urlsplit(lb.endpoint)
    pieces = [b"abc" * 1000, b"defg" * 5000, b"z"]
    connection = http.client.HTTPConnection(url.hostname or "", url.port)
    with lb.counting() as counting:
        connection.request("PUT", f"/{bucket}/chunked", body=iter(pieces), encode_chunked=True)
        assert connection.getresponse().status == 200
    connection.close()
    assert counting.counts == {"PUT": 1}
    assert filesystem(lb).cat_file(f"{bucket}/chunked") == b"".join(pieces)


def test_a_lost_reply_leaves_the_request_stored(lb: LoopbackS3) -> None:
    fs, path = filesystem(lb, retries=False), f"{lb.new_bucket()}/lost"
    lb.reset_counts()
    lb.inject(1.0, seed=3, kinds=("lost",))
    with pytest.raises((OSError, BotoCoreError)):
        fs.pipe_file(path, b"stored")
    lb.inject(0)
    assert lb.faults()["lost"] == lb.counts()["PUT"] >= 1
    assert fs.cat_file(path) == b"stored"


def test_a_conditional_create_whose_reply_is_lost_is_retried_into_file_exists(
    lb: LoopbackS3,
) -> None:
    """The client repeats the PUT after the reset (aiohttp does, even with botocore's and
    s3fs's retries off); the repeat finds the object its first attempt stored: 412."""
    fs, path = filesystem(lb, retries=False), f"{lb.new_bucket()}/mine"
    lb.reset_counts()
    lb.inject(1.0, seed=3, kinds=("lost",), limit=1)
    with pytest.raises(FileExistsError):
        fs.pipe_file(path, b"mine", mode="create")
    assert lb.faults() == {"lost": 1} and lb.counts() == {"PUT": 2}
    assert fs.cat_file(path) == b"mine"


@pytest.mark.parametrize("kind", ["503", "500", "reset"])
def test_a_refused_request_stores_nothing(lb: LoopbackS3, kind: str) -> None:
    fs, path = filesystem(lb, retries=False), f"{lb.new_bucket()}/refused"
    lb.reset_counts()
    lb.inject(1.0, seed=1, kinds=(kind,))
    with pytest.raises((OSError, BotoCoreError)):
        fs.pipe_file(path, b"never")
    lb.inject(0)
    assert lb.faults()[kind] == lb.counts()["PUT"] >= 1
    assert not fs.exists(path)


def test_moto_api_is_neither_counted_nor_faulted(lb: LoopbackS3) -> None:
    lb.reset_counts()
    lb.inject(1.0, seed=1)
    with urllib.request.urlopen(f"{lb.endpoint}/moto-api/", timeout=10) as reply:
        assert reply.status == 200
    assert lb.counts() == {} and lb.faults() == {}


def test_retries_ride_over_a_few_percent_of_faults(lb: LoopbackS3) -> None:
    fs, bucket = filesystem(lb), lb.new_bucket()
    lb.reset_counts()
    lb.inject(0.05, seed=7)

    def put_and_get(i: int) -> bool:
        body = f"body {i}".encode()
        try:
            fs.pipe_file(f"{bucket}/k{i}", body)
            return fs.cat_file(f"{bucket}/k{i}", start=0, end=len(body)) == body
        except (OSError, BotoCoreError):
            return False

    with ThreadPoolExecutor(8) as pool:  # the retries' back-off sleeps overlap
        done = sum(pool.map(put_and_get, range(200)))
    lb.inject(0)
    faults = lb.faults()
    assert sum(faults.values()) > 0 and set(faults) <= {"503", "500", "reset", "lost"}
    assert done >= 190, f"{done} of 200 done; faults {dict(faults)}; requests {lb.counts()}"
    assert lb.counts()["PUT"] >= 200 and lb.counts()["GET"] >= 200
