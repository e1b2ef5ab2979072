"""The patches of moto's internals apply only on the moto they were written for; on any other version the
local stack runs on moto as it ships (slower), never broken."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from chalicelib.local import moto_patches

ROOT = Path(__file__).resolve().parents[2]

#: a local stack's round trip on a server started under a moto version the patches were not written for
UNPATCHED_ROUND_TRIP = """
import json, logging
logging.basicConfig(level=logging.WARNING, format="%(message)s")
from chalicelib.local import moto_patches
moto_patches.installed_moto = lambda: "99.0.0"
from moto.core.responses import BaseResponse
from moto.dynamodb.responses import DynamoHandler
from moto.stepfunctions.parser.asl.parse.asl_parser import AmazonStateLanguageParser
parse_before = AmazonStateLanguageParser.parse
from chalicelib.local.moto_server import MotoServer
import boto3
server = MotoServer(port=0).start()
dynamodb = boto3.client("dynamodb")
dynamodb.create_table(TableName="t", KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}],
    AttributeDefinitions=[{"AttributeName": "id", "AttributeType": "S"}], BillingMode="PAY_PER_REQUEST")
dynamodb.put_item(TableName="t", Item={"id": {"S": "a"}, "n": {"N": "1"}, "b": {"B": b"\\x00\\x01"}})
item = dynamodb.get_item(TableName="t", Key={"id": {"S": "a"}})["Item"]
sqs = boto3.client("sqs")
url = sqs.create_queue(QueueName="q")["QueueUrl"]
sqs.send_message(QueueUrl=url, MessageBody="hello")
body = sqs.receive_message(QueueUrl=url)["Messages"][0]["Body"]
footprint = server.footprint()
import tempfile
from chalicelib.local.snapshot import MotoSnapshot
snapshot = MotoSnapshot(tempfile.mkdtemp(), server.url)
saves = [snapshot.save(), snapshot.save()]  # no change log on this moto: every save reads every table
print(json.dumps({
    "snapshots": [(c.full, c.tables.get("t")) for c in saves],
    "applies": moto_patches.patches_apply(),
    "serializer_is_moto": DynamoHandler.serialized is BaseResponse.serialized,
    "parser_is_moto": AmazonStateLanguageParser.parse is parse_before,
    "item": {"n": item["n"]["N"], "b": item["b"]["B"].hex()},
    "body": body,
    "footprint": footprint is None,
}))
server.stop()
"""


def test_on_the_pinned_moto_the_patches_apply() -> None:
    from importlib.metadata import version

    assert (
        version("moto") == moto_patches.PATCHED_FOR
    )  # pyproject.toml pins what the patches were written for
    assert moto_patches.patches_apply()
    assert moto_patches.speed_up_moto()
    from moto.dynamodb.responses import DynamoHandler

    assert DynamoHandler.serialized is moto_patches.serialized_as_json


def test_on_another_moto_nothing_is_patched_and_the_stack_still_works() -> None:
    done = subprocess.run(
        [sys.executable, "-c", UNPATCHED_ROUND_TRIP], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen == {
        "snapshots": [[True, 1], [True, 1]],
        "applies": False,
        "serializer_is_moto": True,
        "parser_is_moto": True,
        "item": {"n": "1", "b": "0001"},
        "body": "hello",
        "footprint": True,
    }
    assert "not applied: moto runs as it ships" in done.stderr


def test_emptying_in_place_is_refused_on_another_moto(monkeypatch) -> None:
    monkeypatch.setattr(moto_patches, "installed_moto", lambda: "99.0.0")
    moto_patches.patches_apply.cache_clear()
    try:
        assert moto_patches.footprint("123456789012", "us-east-1") is None
        assert not moto_patches.empty_in_place("123456789012", "us-east-1", moto_patches.Footprint())
    finally:
        moto_patches.patches_apply.cache_clear()
