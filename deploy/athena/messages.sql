-- The orderlog archive as an Athena table (docs/format/archive.md).
--
-- Replace BUCKET and PREFIX, in LOCATION and in storage.location.template,
-- with those of the archive's --archive s3://BUCKET/PREFIX (an archive without
-- a prefix: s3://BUCKET/ and s3://BUCKET/dt=${dt}/); rename the table if you
-- like. Partition projection computes the dt partitions from the range below,
-- so neither MSCK REPAIR TABLE nor ALTER TABLE ADD PARTITION is ever needed.
-- The range runs from 2024-01-01 (move it to the archive's first day to plan
-- fewer partitions) to today.
--
-- The columns are the archive file's, in its order, with its names and types
-- (deploy/athena/athena_test.go checks them against what the writer writes).
-- dt is the UTC day of a file's first message: filter on it so that a query
-- reads only those days' files. The manifest (PREFIX/_manifest/, JSON) lies
-- outside every dt= partition: the table never reads it.

CREATE EXTERNAL TABLE IF NOT EXISTS orderlog_messages (
  `log_offset`     bigint,
  `topic`          string,
  `key`            binary,
  `producer_id`    bigint,
  `producer_seq`   bigint,
  `message_id`     binary,
  `ingest_time`    timestamp,
  `client_time`    timestamp,
  `payload`        binary,
  `headers`        array<struct<key:string,value:binary>>,
  `schema_version` int,
  `schema_id`      bigint
)
PARTITIONED BY (
  `dt` string
)
STORED AS PARQUET
LOCATION 's3://BUCKET/PREFIX/'
TBLPROPERTIES (
  'projection.enabled' = 'true',
  'projection.dt.type' = 'date',
  'projection.dt.format' = 'yyyy-MM-dd',
  'projection.dt.range' = '2024-01-01,NOW',
  'projection.dt.interval' = '1',
  'projection.dt.interval.unit' = 'DAYS',
  'storage.location.template' = 's3://BUCKET/PREFIX/dt=${dt}/'
);
