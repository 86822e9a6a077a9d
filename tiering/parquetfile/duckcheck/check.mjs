// check.mjs: DuckDB as an independent reader of orderlog archive files
// (docs/format/archive.md). Test-only; run by the Go test in ../duckdb_test.go.
//
//   node check.mjs FILE...       prints a JSON array, one object per file:
//     rows, min_offset, max_offset (decimal strings), in_order (rows come
//     back from a plain scan in strictly increasing log_offset order),
//     columns ([{name, type}] as DuckDB types them), kv (the footer
//     key-values from parquet_kv_metadata), holes (recomputed from the
//     rows and orderlog.first/end, in the orderlog.holes form) and digest
//     (recomputed over every column in log_offset order with the canonical
//     encoding below).
//   node check.mjs --recipe DIR  prints {topic: count} from the query the
//     format doc gives for a directory of dt=YYYY-MM-DD partitions.
//   node check.mjs --schemas DIR  prints, for every row of the archive in
//     DIR (a local copy of the prefix), [log_offset, topic, schema_id,
//     schema_version, and from the schema object the row names (joined
//     from DIR/_schemas/*/*.json on subject = topic and version =
//     schema_version) its id, schemaType and schema], in offset order.
//   node check.mjs --encrypted KEY FILE  reads an encrypted file: prints
//     {no_key_error, rows: [[log_offset, payload as UTF-8]...]}, the error
//     of a read without the key, then the rows read with KEY (base64) given
//     by PRAGMA add_parquet_key (the recipe of docs/format/archive.md).
//
// Canonical row encoding (the same as tiering/parquetfile/digest.go): the
// columns in schema order; integers little-endian; "bytes" is a u32 length
// and the bytes; nullable columns start with a presence byte (0 null, 1
// present) and the value follows only when present:
//   log_offset i64 | topic bytes | key presence,bytes | producer_id i64 |
//   producer_seq i64 | message_id presence,bytes | ingest_time i64 (µs) |
//   client_time presence,i64 (µs) | payload bytes |
//   headers u32 count, then per header key bytes, value bytes |
//   schema flags (bit 0 schema_version present, bit 1 schema_id present) |
//   schema_version i32 if present | schema_id i64 if present
// A format version 1 file has no schema_id column and every schema_version
// null: its flags byte is 0, the presence byte of version 1's encoding.
// digest = "sha256:" + hex(SHA-256(concatenation of every row's encoding)).

import { createHash } from 'node:crypto';
import { DuckDBInstance } from '@duckdb/node-api';

const quote = (s) => `'${s.replaceAll("'", "''")}'`;

async function rows(conn, sql, onRow) {
  const result = await conn.stream(sql);
  for (;;) {
    const chunk = await result.fetchChunk();
    if (!chunk || chunk.rowCount === 0) break;
    for (const row of chunk.getRows()) onRow(row);
  }
}

const u32 = (n) => { const b = Buffer.alloc(4); b.writeUInt32LE(n); return b; };
const i64 = (n) => { const b = Buffer.alloc(8); b.writeBigInt64LE(BigInt(n)); return b; };
const i32 = (n) => { const b = Buffer.alloc(4); b.writeInt32LE(n); return b; };
const bytes = (u8) => [u32(u8.length), Buffer.from(u8)];
const text = (s) => bytes(Buffer.from(s, 'utf8'));
const present = (v, enc) => (v === null ? [Buffer.of(0)] : [Buffer.of(1), ...enc(v)]);

// rowEncoding returns the canonical encoding of one row of `select *`.
function rowEncoding(r) {
  const [offset, topic, key, producerID, producerSeq, messageID, ingest, client, payload, headers, schemaVersion] = r;
  const schemaID = r.length > 11 ? r[11] : null;
  const parts = [
    i64(offset), ...text(topic),
    ...present(key, (v) => bytes(v.bytes)),
    i64(producerID), i64(producerSeq),
    ...present(messageID, (v) => bytes(v.bytes)),
    i64(ingest.micros),
    ...present(client, (v) => [i64(v.micros)]),
    ...bytes(payload.bytes),
    u32(headers.items.length),
  ];
  for (const h of headers.items) parts.push(...text(h.entries.key), ...bytes(h.entries.value.bytes));
  parts.push(Buffer.of((schemaVersion === null ? 0 : 1) | (schemaID === null ? 0 : 2)));
  if (schemaVersion !== null) parts.push(i32(schemaVersion));
  if (schemaID !== null) parts.push(i64(schemaID));
  return Buffer.concat(parts);
}

async function checkFile(conn, file) {
  const src = `read_parquet(${quote(file)})`;
  const out = { file };

  out.kv = {};
  await rows(conn, `select key, value from parquet_kv_metadata(${quote(file)})`, ([k, v]) => {
    out.kv[Buffer.from(k.bytes).toString('utf8')] = Buffer.from(v.bytes).toString('utf8');
  });

  out.columns = [];
  await rows(conn, `select column_name, column_type from (describe select * from ${src})`, ([name, type]) => {
    out.columns.push({ name, type });
  });

  // A plain scan: count, bounds, order, and the holes between the rows.
  const first = BigInt(out.kv['orderlog.first'] ?? '0');
  const end = BigInt(out.kv['orderlog.end'] ?? '0');
  let count = 0, min = null, max = null, prev = null, inOrder = true, next = first;
  const holes = [];
  await rows(conn, `select log_offset from ${src}`, ([o]) => {
    count++;
    if (min === null || o < min) min = o;
    if (max === null || o > max) max = o;
    if (prev !== null && o <= prev) inOrder = false;
    if (o > next) holes.push(`[${next},${o}]`);
    next = o + 1n;
    prev = o;
  });
  if (next < end) holes.push(`[${next},${end}]`);
  Object.assign(out, {
    rows: count,
    min_offset: min === null ? null : String(min),
    max_offset: max === null ? null : String(max),
    in_order: inOrder,
    holes: inOrder ? `[${holes.join(',')}]` : null,
  });

  const hash = createHash('sha256');
  await rows(conn, `select * from ${src} order by log_offset`, (r) => hash.update(rowEncoding(r)));
  out.digest = 'sha256:' + hash.digest('hex');
  return out;
}

async function recipe(conn, dir) {
  const counts = {};
  const sql = `select topic, count(*) from read_parquet(${quote(dir + '/*/*.parquet')}, hive_partitioning=true) group by 1`;
  await rows(conn, sql, ([topic, n]) => { counts[topic] = Number(n); });
  return counts;
}

async function schemas(conn, dir) {
  const out = [];
  const sql = `select d.log_offset, d.topic, d.schema_id, d.schema_version, s.id, s.schemaType, s.schema
    from read_parquet(${quote(dir + '/dt=*/*.parquet')}) d
    left join read_json(${quote(dir + '/_schemas/*/*.json')}, columns = {subject: 'VARCHAR', version: 'INTEGER', id: 'BIGINT', schemaType: 'VARCHAR', schema: 'VARCHAR'}) s
      on s.subject = d.topic and s.version = d.schema_version
    order by d.log_offset`;
  await rows(conn, sql, (r) => out.push(r.map((v) => (typeof v === 'bigint' ? Number(v) : v))));
  return out;
}

async function encrypted(conn, key, file) {
  const out = { no_key_error: null, rows: [] };
  try {
    await conn.run(`select count(*) from read_parquet(${quote(file)})`);
  } catch (err) {
    out.no_key_error = err.message.split('\n')[0];
  }
  await conn.run(`PRAGMA add_parquet_key('orderlog', ${quote(key)})`);
  const src = `read_parquet(${quote(file)}, encryption_config = {footer_key: 'orderlog'})`;
  await rows(conn, `select log_offset, payload from ${src}`, ([o, p]) => {
    out.rows.push([String(o), Buffer.from(p.bytes).toString('utf8')]);
  });
  return out;
}

async function main(args) {
  const instance = await DuckDBInstance.create(':memory:');
  const conn = await instance.connect();
  try {
    if (args[0] === '--recipe') return await recipe(conn, args[1]);
    if (args[0] === '--encrypted') return await encrypted(conn, args[1], args[2]);
    if (args[0] === '--schemas') return await schemas(conn, args[1]);
    const out = [];
    for (const file of args) out.push(await checkFile(conn, file));
    return out;
  } finally {
    conn.closeSync();
    instance.closeSync();
  }
}

const args = process.argv.slice(2);
if (args.length === 0 || (['--recipe', '--schemas'].includes(args[0]) && args.length !== 2) || (args[0] === '--encrypted' && args.length !== 3)) {
  console.error('usage: node check.mjs FILE... | node check.mjs --recipe DIR | node check.mjs --schemas DIR | node check.mjs --encrypted KEY FILE');
  process.exit(2);
}
main(args).then(
  (out) => console.log(JSON.stringify(out, null, 1)),
  (err) => { console.error(err); process.exit(1); },
);
