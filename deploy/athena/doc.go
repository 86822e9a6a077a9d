// Package athena holds the Amazon Athena table over the Parquet archive
// (messages.sql) and, in its test, the check that the table's columns are
// the archive file's: names, order and types, against what
// tiering/parquetfile writes. It has no code of its own: the SQL is the
// deliverable, and docs/operations.md says how to use it.
package athena
