"""What each Lambda function may do on AWS: one table, from which `infra/stack.py` writes one IAM role per
function into the merge template.

The table follows what the code calls. `tests/infra/test_iam_roles.py` proves it: the end-to-end suite runs
on moto with every AWS call recorded per function (`chalicelib/local/aws_calls.py`), and each recorded call
is evaluated against that function's role in the packaged template, so a missing permission fails
`make test`. Calls that moto cannot serve (Bedrock, Textract, OpenSearch, SSM) are granted from the adapter
that makes them, named in `why`. `tests/infra/test_iam_reach.py` checks the paths no test takes: it walks the
code from each function's entry and asks the role about every queue, table and Step Functions request a port
call there can make.

Resources are CloudFormation expressions of the merged template's logical ids. `*` stands only where the
service has no resource-level permission for the action; `why` says so.

`infra/stack.py` gives each function the URLs of exactly the queues (and dead-letter queues) its SQS grants
here name, so its code does not look them up and its role has no sqs:GetQueueUrl; a queue used without a
grant here has no URL either, and both checks above fail on it. A grant that includes sqs:GetQueueUrl says
the function looks those queues up instead (only the API, for the dead-letter queues: see its `why`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

#: the tables (logical ids in infra/template.json) by the name the code's settings give them
TABLES = {
    "tenants": "TenantsTable",
    "knowledge-bases": "KnowledgeBasesTable",
    "knowledge": "KnowledgeTable",
    "dedupe": "DedupeTable",
    "chunks": "ChunksTable",
    "spans": "SpansTable",
    "embedding-cache": "EmbeddingCacheTable",
    "tasks": "TasksTable",
    "usage": "UsageTable",
    "turns": "TurnsTable",
    "graph": "GraphTable",
    "wiki": "WikiTable",
    "tags": "TagsTable",
    "faq": "FaqTable",
    "webhooks": "WebhooksTable",
    "resources": "ResourcesTable",
    "request-counts": "RequestCountsTable",
}
#: the stage queues (logical ids) by the name the code sends to; each has `<Name>DeadLetterQueue`
QUEUES = {
    "uploads": "UploadsQueue",
    "docreader": "DocreaderQueue",
    "chunking": "ChunkingQueue",
    "embedding": "EmbeddingQueue",
    "multimodal": "MultimodalQueue",
    "postprocess": "PostprocessQueue",
    "enrichment": "EnrichmentQueue",
    "lifecycle": "LifecycleQueue",
    "wiki": "WikiQueue",
    "faq-import": "FaqImportQueue",
    "webhooks": "WebhooksQueue",
    "webhooks-slow": "WebhooksSlowQueue",
}

READ = ("dynamodb:GetItem", "dynamodb:BatchGetItem", "dynamodb:Query", "dynamodb:ConditionCheckItem")
WRITE = ("dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:DeleteItem", "dynamodb:BatchWriteItem")


@dataclass(frozen=True)
class Grant:
    actions: tuple[str, ...]
    resources: tuple[Any, ...]
    #: required where the resource is "*" or the call is not made on moto
    why: str = ""


def dead_letter_queue(queue: str) -> str:
    return QUEUES[queue].replace("Queue", "DeadLetterQueue")


def _arn(logical: str) -> dict[str, Any]:
    return {"Fn::GetAtt": [logical, "Arn"]}


def tables(*names: str) -> tuple[Any, ...]:
    """The tables and their indexes (a Query on a GSI is authorised on `<table>/index/<name>`)."""
    found: list[Any] = []
    for name in names:
        found += [_arn(TABLES[name]), {"Fn::Sub": f"${{{TABLES[name]}.Arn}}/index/*"}]
    return tuple(found)


def queues(*names: str) -> tuple[Any, ...]:
    return tuple(_arn(QUEUES[name]) for name in names)


def dead_letter_queues(*names: str) -> tuple[Any, ...]:
    return tuple(_arn(dead_letter_queue(name)) for name in names)


def objects(prefix: str = "") -> dict[str, Any]:
    """Objects of the files bucket under `prefix`: tenants' files sit at the top level (`{tenant}/…`), so
    only the service prefixes (uploads/, intents/, faq-imports/, transcribe/, image-texts/) can narrow a
    grant."""
    return {"Fn::Sub": f"${{FilesBucket.Arn}}/{prefix}*"}


BUCKET = _arn("FilesBucket")
#: the tables of the tenants' data (the request counts are the API's own: it alone counts, with UpdateItem)
ALL_TABLES = tuple(name for name in TABLES if name != "request-counts")
ALL_QUEUES = tuple(QUEUES)
EXECUTIONS = {
    "Fn::Sub": "arn:${AWS::Partition}:states:${AWS::Region}:${AWS::AccountId}:execution:${Prefix}-knowledge:*"
}


def read_tables(*names: str) -> Grant:
    return Grant(READ, tables(*names))


def write_tables(*names: str) -> Grant:
    return Grant(WRITE, tables(*names))


def send_to(*names: str) -> Grant:
    return Grant(("sqs:SendMessage",), queues(*names))


def own_queue(name: str) -> list[Grant]:
    """What a function triggered by `name` does on it: the event source mapping receives and deletes (with
    the function's role), the runner delays a retry (ChangeMessageVisibility), re-sends a continuation, and
    parks a poison message in the dead-letter queue. No sqs:GetQueueUrl: the function is given both URLs
    (infra/stack.py `queue_url_environment`)."""
    return [
        Grant(
            (
                "sqs:ReceiveMessage",
                "sqs:DeleteMessage",
                "sqs:GetQueueAttributes",
                "sqs:ChangeMessageVisibility",
                "sqs:SendMessage",
            ),
            queues(name),
        ),
        Grant(("sqs:SendMessage",), dead_letter_queues(name)),
    ]


READ_OBJECTS = Grant(
    ("s3:GetObject",),
    (objects(),),
)
#: a HeadObject/GetObject of a missing key answers 404 only to a caller that may list the bucket (else 403);
#: the API also lists a tenant's pending FAQ uploads (faq/uploads.py). Not narrowed by an s3:prefix
#: condition: a HeadObject carries no prefix, so the condition would turn every 404 into a 403
LIST_BUCKET = Grant(("s3:ListBucket",), (BUCKET,))
SEARCH_INDEX = Grant(
    ("es:ESHttpGet", "es:ESHttpHead", "es:ESHttpPost", "es:ESHttpPut", "es:ESHttpDelete"),
    # by name, not GetAtt: the domain's access policy names the roles, and a GetAtt both ways is a cycle
    ({"Fn::Sub": "arn:${AWS::Partition}:es:${AWS::Region}:${AWS::AccountId}:domain/${Prefix}-index/*"},),
    why="adapters/index/opensearch.py signs its requests (SigV4); not a botocore call, so not recorded",
)
BEDROCK = Grant(
    ("bedrock:InvokeModel",),
    (
        {"Fn::Sub": "arn:${AWS::Partition}:bedrock:*::foundation-model/*"},
        {"Fn::Sub": "arn:${AWS::Partition}:bedrock:${AWS::Region}:${AWS::AccountId}:inference-profile/*"},
    ),
    why="adapters/models/bedrock.py (embeddings, chat, vision); a cross-region inference profile "
    "(us.amazon.nova-lite-v1:0) invokes the foundation model in each of its regions, hence the * region",
)
TASK_CALLBACKS = Grant(
    ("states:SendTaskSuccess", "states:SendTaskFailure", "states:SendTaskHeartbeat"),
    ("*",),
    why="task-token callbacks have no resource-level permission: the token names the task",
)
#: what a function that decides a change does to announce it (services/events.py): the event on the bus, and
#: one message per interested webhook of the knowledge base on the webhooks queue, or in its dead-letter queue
#: when the queue does not take it (parked for redrive); a degraded webhook's delivery goes to the slow lane
PUBLISH = Grant(("events:PutEvents",), (_arn("EventBus"),))
PARK_DELIVERY = Grant(("sqs:SendMessage",), dead_letter_queues("webhooks"))
ANNOUNCE = [PUBLISH, Grant(READ, tables("webhooks")), send_to("webhooks", "webhooks-slow"), PARK_DELIVERY]
OCR = Grant(
    ("textract:DetectDocumentText",),
    ("*",),
    why="parsers/ocr.py TextractOcr; Textract has no resource-level permission (synchronous calls on bytes)",
)


#: what either webhook lane's function does beside its queues (stages/webhooks.py)
WEBHOOK_DELIVERY = [
    # spans: a failure the state machine announces closes the attempt's open spans (`announced`)
    read_tables("webhooks", "knowledge", "spans", "turns"),
    write_tables(
        "webhooks", "spans", "turns"
    ),  # turns: the slow lane's tenant shares (services/lane_shares.py)
    PUBLISH,  # the state machine's announcements (stages/webhooks.py `announced`)
]


# ---------------------------------------------------------------- the table

FUNCTIONS: dict[str, list[Grant]] = {
    # The HTTP API: every read, the writes of create/edit/tags/FAQ/tenants, presigned uploads, the
    # operators' DLQ listing and redrive (back to any stage queue), the execution history of a document.
    "APIHandler": [
        read_tables(*ALL_TABLES),
        write_tables(
            "tenants",
            "knowledge-bases",
            "knowledge",
            "dedupe",
            "chunks",
            "spans",
            "embedding-cache",
            "tasks",
            "usage",
            "tags",
            "faq",
            "turns",
            "webhooks",
            "resources",
            "wiki",  # a reparse drops the document's wiki pages (remove_derived_data)
            "graph",  # ... and its graph facts
        ),
        PUBLISH,
        # a tenant's request limit: one conditional ADD per request (operations/tenants.py count_request)
        Grant(("dynamodb:UpdateItem",), (_arn(TABLES["request-counts"]),)),
        Grant(("dynamodb:Scan",), tables("tenants")),
        Grant(("dynamodb:DescribeTable",), tables("knowledge")),
        Grant(("s3:GetObject", "s3:PutObject", "s3:DeleteObject"), (objects(),)),
        LIST_BUCKET,
        send_to(*ALL_QUEUES),
        PARK_DELIVERY,
        Grant(("sqs:GetQueueAttributes",), queues(*ALL_QUEUES) + dead_letter_queues(*ALL_QUEUES)),
        Grant(
            ("sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:ChangeMessageVisibility", "sqs:GetQueueUrl"),
            dead_letter_queues(*ALL_QUEUES),
            why="the operators' DLQ routes look the dead-letter queues up (through the queue's RedrivePolicy) "
            "rather than take 11 more URLs into an environment Lambda caps at 4 KB "
            "(tests/infra/test_queue_urls.py)",
        ),
        Grant(
            ("states:DescribeExecution", "states:GetExecutionHistory", "states:StopExecution"), (EXECUTIONS,)
        ),
        SEARCH_INDEX,
        BEDROCK,
        Grant(
            ("ssm:GetParameter",),
            (
                {
                    "Fn::Sub": "arn:${AWS::Partition}:ssm:${AWS::Region}:${AWS::AccountId}"
                    ":parameter/${Prefix}/${OperatorKeyName}"
                },
            ),
            why="adapters/secrets.py: the operator key, a SecureString under the AWS-managed aws/ssm key "
            "(no kms grant needed); read on the first admin request",
        ),
    ],
    # S3 ObjectCreated on uploads/ -> the same create path as the API
    "OnUploadEvent": [
        *ANNOUNCE,
        *own_queue("uploads"),
        # resources: the uploaded original is registered in the resource catalog (services/resources.py)
        read_tables("tenants", "knowledge-bases", "knowledge", "dedupe", "tags", "turns", "resources"),
        write_tables("tenants", "knowledge", "dedupe", "tags", "turns", "resources"),
        Grant(("s3:GetObject", "s3:DeleteObject"), (objects("uploads/"),)),
        # an accepted upload's intent is deleted (consumed): a replayed PUT cannot create it again
        Grant(("s3:GetObject", "s3:PutObject", "s3:DeleteObject"), (objects("intents/"),)),
        Grant(("s3:PutObject",), (objects(),)),
        LIST_BUCKET,
        send_to("docreader"),
    ],
    "DocreaderStage": [
        *ANNOUNCE,
        *own_queue("docreader"),
        # resources: the parsed Markdown and the extracted images are registered as they are written
        read_tables("tenants", "knowledge-bases", "knowledge", "spans", "turns", "resources"),
        write_tables("tenants", "knowledge", "spans", "usage", "turns", "resources"),
        Grant(("s3:GetObject", "s3:PutObject", "s3:DeleteObject"), (objects(),)),
        LIST_BUCKET,
        send_to("chunking"),
        OCR,
        Grant(
            (
                "transcribe:StartTranscriptionJob",
                "transcribe:GetTranscriptionJob",
                "transcribe:DeleteTranscriptionJob",
            ),
            (
                {
                    "Fn::Sub": "arn:${AWS::Partition}:transcribe:${AWS::Region}:${AWS::AccountId}"
                    ":transcription-job/${Prefix}-*"
                },
            ),
        ),
    ],
    "ChunkingStage": [
        *ANNOUNCE,
        *own_queue("chunking"),
        read_tables("tenants", "knowledge-bases", "knowledge", "chunks", "spans", "resources"),
        write_tables("tenants", "knowledge", "chunks", "spans", "usage", "resources"),
        # a document that fails here has its never-counted attempt's Markdown and images removed (and their
        # catalog entries marked deleted)
        # (services/stored_size.py remove_uncounted_outputs)
        Grant(("s3:GetObject", "s3:DeleteObject"), (objects(),)),
        LIST_BUCKET,
        # a document that fails here gives its place at the door back and wakes the tenant's next waiter
        send_to("embedding", "docreader"),
    ],
    "EmbeddingStage": [
        *ANNOUNCE,
        *own_queue("embedding"),
        # a rollback drops what the knowledge's attempts derived (remove_derived_data): its wiki pages (and has
        # the knowledge base's wiki index rebuilt) and graph facts
        read_tables(
            "tenants",
            "knowledge-bases",
            "knowledge",
            "chunks",
            "spans",
            "embedding-cache",
            "wiki",
            "graph",
            "resources",
        ),
        write_tables(
            "tenants",
            "knowledge",
            "chunks",
            "spans",
            "embedding-cache",
            "usage",
            "wiki",
            "graph",
            "resources",
        ),
        Grant(("s3:GetObject", "s3:DeleteObject"), (objects(),)),
        LIST_BUCKET,
        # an indexed (or failed) document gives its place at the door back and wakes the tenant's next waiter
        send_to("docreader", "wiki"),
        Grant(("states:StartExecution",), ({"Ref": "KnowledgeStateMachine"},)),
        # a message of an attempt handed over already starts its machine only if it does not run
        Grant(("states:DescribeExecution",), (EXECUTIONS,)),
        SEARCH_INDEX,
        BEDROCK,
    ],
    "MultimodalTask": [
        *own_queue("multimodal"),
        read_tables("knowledge-bases", "knowledge", "chunks", "spans", "embedding-cache"),
        write_tables("chunks", "spans", "embedding-cache", "usage"),
        READ_OBJECTS,
        LIST_BUCKET,
        # the tenants' cached image texts (chalicelib/services/image_texts.py), and nothing else it writes
        Grant(("s3:PutObject",), (objects("image-texts/"),)),
        TASK_CALLBACKS,
        OCR,
        SEARCH_INDEX,
        BEDROCK,
    ],
    "PostprocessTask": [
        *ANNOUNCE,
        *own_queue("postprocess"),
        read_tables("knowledge-bases", "knowledge", "chunks", "spans", "embedding-cache", "graph"),
        # graph: a new attempt drops the earlier attempts' facts (GraphRepo.keep_only_attempt)
        write_tables("knowledge", "chunks", "spans", "embedding-cache", "usage", "graph"),
        READ_OBJECTS,
        LIST_BUCKET,
        send_to("enrichment"),
        TASK_CALLBACKS,
        SEARCH_INDEX,
        BEDROCK,
    ],
    "EnrichmentTask": [
        *ANNOUNCE,
        *own_queue("enrichment"),
        # graph: facts written for a row deleted meanwhile are found again and removed (delete_knowledge)
        read_tables("knowledge-bases", "knowledge", "chunks", "spans", "embedding-cache", "tags", "graph"),
        write_tables("knowledge", "chunks", "spans", "embedding-cache", "usage", "tags", "graph", "wiki"),
        send_to("wiki"),
        TASK_CALLBACKS,
        SEARCH_INDEX,
        BEDROCK,
    ],
    "WikiTask": [
        *ANNOUNCE,
        *own_queue("wiki"),
        read_tables("knowledge-bases", "knowledge", "chunks", "spans", "embedding-cache", "wiki"),
        # usage: each ingested document's share of the message, a finalize's as the knowledge base's own
        write_tables("knowledge", "chunks", "spans", "embedding-cache", "usage", "wiki"),
        READ_OBJECTS,
        LIST_BUCKET,
        TASK_CALLBACKS,
        SEARCH_INDEX,
        BEDROCK,
    ],
    # Durable lifecycle work: delete, reparse, move and clone touch every aggregate of a knowledge base.
    "LifecycleTask": [
        PUBLISH,  # and it reads the webhooks table among every other
        send_to("webhooks", "webhooks-slow"),
        PARK_DELIVERY,
        *own_queue("lifecycle"),
        read_tables(*ALL_TABLES),
        write_tables(*ALL_TABLES),
        Grant(("s3:GetObject", "s3:PutObject", "s3:DeleteObject"), (objects(),)),
        LIST_BUCKET,
        send_to("docreader", "enrichment", "wiki"),
        # GetExecutionHistory: a big knowledge base's report refresh counts finished executions' transitions
        # (operations/kb_report_refresh.py)
        Grant(
            ("states:DescribeExecution", "states:GetExecutionHistory", "states:StopExecution"), (EXECUTIONS,)
        ),
        SEARCH_INDEX,
        BEDROCK,
    ],
    "FaqImportTask": [
        *ANNOUNCE,
        *own_queue("faq-import"),
        # tenants: the entries' bytes count on the storage quota (faq/validation.py plans with the room left)
        read_tables("knowledge-bases", "tasks", "faq", "embedding-cache", "tenants"),
        # usage: an import is its knowledge base's own (stages/faq_import.py)
        write_tables("tasks", "faq", "embedding-cache", "usage", "tenants"),
        Grant(("s3:GetObject", "s3:PutObject", "s3:DeleteObject"), (objects("faq-imports/"),)),
        LIST_BUCKET,
        SEARCH_INDEX,
        BEDROCK,
    ],
    # rate(5 minutes): stale rows are failed or restarted (from the first stage), lost deletes redriven
    "Housekeeping": [
        *ANNOUNCE,
        # tenants: a row it fails gives its place at the fairness door back and wakes the next waiter;
        # chunks: a summary it fails gets the first text chunk as its description (services/summary_failure.py)
        read_tables(
            "tenants", "knowledge-bases", "knowledge", "chunks", "spans", "tasks", "turns", "resources"
        ),
        write_tables("tenants", "knowledge", "spans", "tasks", "turns", "resources"),
        # lifecycle: lost deletes and open tasks without progress; faq-import: an FAQ import's (tasks.send_again)
        send_to("docreader", "lifecycle", "faq-import"),
        # a row's stage message may wait in any stage queue the pipeline sends to (`queued_stage`): its backlog
        # spares the row (stages/housekeeping.py `_why_alive`)
        Grant(("sqs:GetQueueAttributes",), queues("docreader", "chunking", "embedding")),
        Grant(("states:DescribeExecution",), (EXECUTIONS,)),
        # tasks written before the open index get its keys, a few Scan pages a sweep until none are left
        # (stages/housekeeping.py `_backfill_task_keys`)
        Grant(("dynamodb:Scan",), tables("tasks")),
        # a row it fails has its never-counted attempt's Markdown and images removed (remove_uncounted_outputs)
        Grant(("s3:GetObject", "s3:DeleteObject"), (objects(),)),
        LIST_BUCKET,
    ],
    # the webhooks queue: signs and posts one delivery, logs the try, retries it later (a new message with a
    # delay) or parks it in the DLQ after the last try; it also announces what the state machine decided
    "WebhookDelivery": [
        *own_queue("webhooks"),
        send_to("webhooks-slow"),  # a degraded webhook's tries: forwarded, its retries, its deliveries
        *WEBHOOK_DELIVERY,
    ],
    # the webhooks' slow lane (degraded webhooks' tries): the same code; a retry of a webhook well again goes
    # back to the webhooks queue, and a parked announcement to its DLQ
    "WebhookSlowDelivery": [
        *own_queue("webhooks-slow"),
        send_to("webhooks"),
        PARK_DELIVERY,
        *WEBHOOK_DELIVERY,
    ],
}

#: the named storage backends' keys (StorageBackends, WEKNORA_STORAGE_BACKENDS): a secret of Secrets Manager or
#: an SSM SecureString under `<Prefix>/storage/` (adapters/storage_backends.py reads one when a document first
#: touches its backend). Every function that reads or writes documents' objects may read them, no other.
STORAGE_CREDENTIALS = Grant(
    ("secretsmanager:GetSecretValue", "ssm:GetParameter"),
    (
        {
            "Fn::Sub": "arn:${AWS::Partition}:secretsmanager:${AWS::Region}:${AWS::AccountId}"
            ":secret:${Prefix}/storage/*"
        },
        {
            "Fn::Sub": "arn:${AWS::Partition}:ssm:${AWS::Region}:${AWS::AccountId}:parameter/${Prefix}/storage/*"
        },
    ),
)


def _touches_documents(grants: list[Grant]) -> bool:
    """Reads or writes the documents' objects: an S3 grant on the whole bucket, not only a service prefix."""
    return any(objects() in g.resources for g in grants)


for _grants in FUNCTIONS.values():
    if _touches_documents(_grants):
        _grants.append(STORAGE_CREDENTIALS)

#: every function writes its own log group (infra/stack.py adds it) and sends X-Ray segments
TRACING = Grant(
    ("xray:PutTraceSegments", "xray:PutTelemetryRecords"),
    ("*",),
    why="X-Ray has no resource-level permission; Powertools' Tracer sends the handlers' segments",
)
#: only where OpenSearchSubnetIds puts the functions that search or index in the domain's VPC
VPC_NETWORK_INTERFACES = Grant(
    (
        "ec2:CreateNetworkInterface",
        "ec2:DescribeNetworkInterfaces",
        "ec2:DescribeSubnets",
        "ec2:DeleteNetworkInterface",
        "ec2:AssignPrivateIpAddresses",
        "ec2:UnassignPrivateIpAddresses",
    ),
    ("*",),
    why="Lambda attaches a function to its VPC through network interfaces it creates in the role's name; "
    "AWS gives these actions no resource-level permission (AWSLambdaVPCAccessExecutionRole's list)",
)
