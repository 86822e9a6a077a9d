package main

import (
	"fmt"
	"strings"
)

// summarize prints the table, the ratio lines and the verdict; without
// all, only the writers' and tiering's (-only tiering).
func (r *results) summarize(all bool) {
	if !all {
		r.summarizeTiering()
		return
	}
	fmt.Printf("\n%-46s %16s %16s %8s\n", "figure", "measured", "reference", "ratio")
	row := func(name string, v, ref float64, unit string) {
		fmt.Printf("%-46s %16s %16s %8.2f\n", name, fmt.Sprintf("%.1f %s", v, unit), fmt.Sprintf("%.1f %s", ref, unit), v/ref)
	}
	row("tiering worker vs plain arrow-go writer", r.tieringRate, r.plainRate, "rows/s")
	row("tiering worker vs parquetfile.Writer", r.tieringRate, r.archiveRate, "rows/s")
	row("parquetfile.Writer vs plain arrow-go writer", r.archiveRate, r.plainRate, "rows/s")
	row("archive read vs hot read (client.Read)", r.archiveMBps, r.hotMBps, "MB/s")
	row("archive read, cold cache, vs hot read", r.archiveColdMB, r.hotMBps, "MB/s")
	row("produce p99 at half rate, tiering vs none", r.latency.tieringP99, r.latency.plainP99, "ms")
	fmt.Printf("%-46s %16s %16s\n", "absent key: data page bytes read (format)", fmt.Sprint(r.absent.format.data), "-")
	fmt.Printf("%-46s %16s %16s\n", "present key: data page bytes read (format)", fmt.Sprint(r.present.format.data), "-")
	fmt.Println()
	fmt.Printf("rows=%d committed=%d produce_rows_per_s=%.0f\n", r.rows, r.committed, r.produceRate)
	fmt.Printf("tiering_rows_per_s=%.0f (the worker: %d rows from the restarted dev's /readyz to T = C in %.2f s, %.0f files, %.1f MB; %.0f rows/s between its first and last file)\n",
		r.tieringRate, r.committed, r.tieringSeconds, r.files, r.archiveBytes/1e6, r.tieringSteady)
	fmt.Printf("plain_parquet_rows_per_s=%.0f (plain arrow-go, the archive's settings, %d rows per round, encode and write only; median of rounds)\n", r.plainRate, r.refRows)
	fmt.Printf("parquetfile_rows_per_s=%.0f (tiering/parquetfile.Writer, the same rows; median of rounds)\n", r.archiveRate)
	fmt.Printf("plain_file_bytes=%d parquetfile_file_bytes=%d archive_bytes=%.0f\n", r.plainBytes, r.parquetBytes, r.archiveBytes)
	r.printCPU()
	fmt.Printf("hot_read_mb_per_s=%.1f hot_read_msgs_per_s=%.0f (client.Read of [0, %d) before deletion; median of rounds)\n", r.hotMBps, r.hotMsgs, r.committed)
	fmt.Printf("archive_read_mb_per_s=%.1f archive_read_msgs_per_s=%.0f archive_read_cold_mb_per_s=%.1f (client.Read of [0, %d) after retention deleted %.0f ledgers; median of rounds, the first with the block cache cold)\n",
		r.archiveMBps, r.archiveMsgs, r.archiveColdMB, r.logStart, r.deletedLedgers)
	printQuery("absent_key", absentKey, r.absent, r.absentServerMs, r.logStart)
	printQuery("present_key", presentKey, r.present, r.presentSrv, r.presentScanEnd)
	fmt.Printf("produce_p99_plain_ms=%.3f produce_p99_tiering_ms=%.3f (half of the plain dev's peak %.0f msg/s: %.0f msg/s; medians of rounds; the tiering dev published %.0f files meanwhile)\n",
		r.latency.plainP99, r.latency.tieringP99, r.latency.peak, r.latency.rate, r.latency.files)

	tierRatio := r.tieringRate / r.plainRate
	readRatio := r.archiveMBps / r.hotMBps
	fmt.Printf("tier_vs_parquet_ratio=%.2f (goal ≥ %.1f)\n", tierRatio, goalTierVsParquet)
	fmt.Printf("parquetfile_vs_plain_ratio=%.2f (median of the rounds' ratios)\n", r.writerRatio)
	fmt.Printf("archive_read_vs_hot_ratio=%.2f (goal ≥ %.1f; cold cache: %.2f)\n", readRatio, goalArchiveVsHot, r.archiveColdMB/r.hotMBps)
	fmt.Printf("absent_key_query_data_bytes=%d (goal 0)\n", r.absent.format.data)
	fmt.Printf("produce_p99_tiering_vs_plain_ratio=%.2f (median of the rounds' ratios; not a goal)\n", r.latency.ratio)
	var failed []string
	if !(tierRatio >= goalTierVsParquet) {
		failed = append(failed, "tier_vs_parquet")
	}
	if !(readRatio >= goalArchiveVsHot) {
		failed = append(failed, "archive_read_vs_hot")
	}
	if r.absent.format.data != 0 {
		failed = append(failed, "absent_key_query_data_bytes")
	}
	if len(failed) > 0 {
		fmt.Printf("tiering_result=FAIL (missed: %s)\n", strings.Join(failed, ", "))
		return
	}
	fmt.Println("tiering_result=PASS")
}

func printQuery(name string, key []byte, q queryResult, serverMs float64, scanEnd uint64) {
	fmt.Printf("%s_query: key %q, %d matching rows; the format's reader (parquetfile.Open + Query on each file, uncached): read %d bytes, %d in data pages, %d in dictionary pages, the rest footers, page indexes and bloom filters; %.2f ms\n",
		name, key, q.matches, q.format.total, q.format.data, q.format.dict, q.formatLatency)
	fmt.Printf("%s_query: tiering.ArchiveReader.Scan of [0, %d) (a node's read below the log start): %d GETs of %d bytes with its block cache cold (1 MiB blocks, 2 read ahead), %d of them in data pages; %.2f ms cold, %.2f ms warm; %d matching rows visited\n",
		name, scanEnd, q.scanGets, q.scan.total, q.scan.data, q.scanCold, q.scanWarm, q.scanMatches)
	fmt.Printf("%s_query_ms=%.2f %s_query_server_ms=%.2f (in-process Scan, warm cache; client.Query through the dev; medians of rounds)\n",
		name, q.scanWarm, name, serverMs)
}

// summarizeTiering prints the figures of -only tiering.
func (r *results) summarizeTiering() {
	fmt.Printf("\nrows=%d committed=%d produce_rows_per_s=%.0f\n", r.rows, r.committed, r.produceRate)
	fmt.Printf("tiering_rows_per_s=%.0f (%.0f files, %.1f MB; median of rounds)\n", r.tieringRate, r.files, r.archiveBytes/1e6)
	fmt.Printf("plain_parquet_rows_per_s=%.0f parquetfile_rows_per_s=%.0f (%d rows per round; medians of rounds)\n", r.plainRate, r.archiveRate, r.refRows)
	fmt.Printf("tier_vs_parquet_ratio=%.2f (goal ≥ %.1f)\n", r.tieringRate/r.plainRate, goalTierVsParquet)
	fmt.Printf("tier_vs_parquetfile_ratio=%.2f\n", r.tieringRate/r.archiveRate)
	r.printCPU()
	fmt.Printf("parquetfile_vs_plain_ratio=%.2f (median of the rounds' ratios)\n", r.writerRatio)
}

// printCPU prints the CPU time per row of the plain writer and of the
// tiering dev, and the ratio of the two (not a goal: beside the rates,
// which the machine's other load moves more).
func (r *results) printCPU() {
	if r.tieringCPUPerRow == 0 || r.plainCPUPerRow == 0 {
		return
	}
	fmt.Printf("plain_cpu_us_per_row=%.2f tiering_cpu_us_per_row=%.2f tier_vs_parquet_cpu_ratio=%.2f (the plain writer's thread; the tiering dev, every thread, /readyz to T = C; medians of rounds)\n",
		r.plainCPUPerRow, r.tieringCPUPerRow, r.plainCPUPerRow/r.tieringCPUPerRow)
}
