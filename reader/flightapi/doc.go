// Package flightapi is orderlog's Arrow Flight service (docs/design.md §8
// and §11): analytics clients (pyarrow, polars, DuckDB, arrow-go) pull an
// offset range of the log, or a query's matches, as Arrow record batches
// of the archive's schema (docs/format/archive.md), hot and archived
// offsets alike. It is registered on the node's gRPC server beside
// orderlog's own services (service arrow.flight.protocol.FlightService).
//
// The usage protocol:
//
//  1. GetFlightInfo with a descriptor of type CMD whose command is a JSON
//     object (Command): an offset range {"first":N,"end":M}, a query
//     {"topic":…,"key":…,"from_time_us":…,"to_time_us":…}, or both. A
//     missing first is the first offset a read may start at, a missing end
//     the committed watermark C.
//  2. The FlightInfo lists endpoints that partition [first, end) in offset
//     order (Ordered). An archived file wholly inside the range is one
//     endpoint whose locations are the object's URL (file:// or s3://,
//     a Parquet file holding every message of its range) and
//     arrow-flight-reuse-connection://? (this service); every other part
//     of the range (the hot log, files cut by the range's ends) is an
//     endpoint with a ticket only.
//  3. DoGet with an endpoint's ticket streams that part: one record batch
//     per page of the read, each with the page's paging in its
//     app_metadata ({"next_offset","committed","skipped"}, internal/arrowpage):
//     holes and compacted ranges are reported there, never as rows.
//
// What it owns: the command and ticket format, the endpoint plan, and the
// paging of a ticket's range through Source. What it must never do: read
// the log or the archive other than through Source (a ticket's read is
// the same read as Query's, so it is identical from the WAL or the
// archive), or hand out a location for a file the manifest does not list.
package flightapi
