import Foundation

/// The three contenders, in the order each repetition runs them.
enum Contender: String, CaseIterable, Codable, Sendable {
    case raw, grdb, contextStack

    var label: String {
        switch self {
        case .raw: "raw"
        case .grdb: "GRDB"
        case .contextStack: "ContextStack"
        }
    }
}

/// One timed repetition: its seconds, plus figures a workload reports beside them.
struct Sample {
    var seconds: Double
    var extra: [String: Double] = [:]
}

/// A workload: how each contender does the same job. `run` does its own untimed setup and
/// returns the time of the job itself; it returns nil for a contender that does not apply.
@MainActor protocol Workload: AnyObject {
    var id: String { get }
    var summary: String { get }
    var target: String { get }
    /// Timed repetitions after the warm-up.
    var repetitions: Int { get }
    /// Why the workload cannot run in this build, if it cannot.
    var unavailable: String? { get }
    func prepare() async throws
    func run(_ contender: Contender) async throws -> Sample?
    func finish() async throws
    func verdict(_ result: WorkloadResult) -> Verdict
}

extension Workload {
    var unavailable: String? { nil }
    func prepare() async throws {}
    func finish() async throws {}
}

/// Whether a target is met, and the figures that say so.
struct Verdict {
    var met: Bool?
    var note: String
}

extension Verdict {
    /// Met when ContextStack's commits cost at most `allowance` seconds each over raw's.
    static func perCommit(_ result: WorkloadResult, commits: Int, allowance: Double) -> Verdict {
        guard let raw = result.median(.raw), let cs = result.median(.contextStack) else { return Verdict(met: nil, note: "missing samples") }
        let extra = (cs - raw) / Double(commits)
        return Verdict(met: extra <= allowance, note: String(format: "%+.1f µs per commit over raw (raw %.1f µs)", extra * 1e6, raw / Double(commits) * 1e6))
    }
}

/// All samples of one workload.
struct WorkloadResult {
    var samples: [Contender: [Sample]] = [:]

    func median(_ contender: Contender) -> Double? {
        guard let values = samples[contender]?.map(\.seconds), !values.isEmpty else { return nil }
        return Statistics.median(values)
    }

    func median(_ contender: Contender, extra key: String) -> Double? {
        let values = samples[contender]?.compactMap { $0.extra[key] } ?? []
        return values.isEmpty ? nil : Statistics.median(values)
    }
}

enum Statistics {
    static func median(_ values: [Double]) -> Double {
        let sorted = values.sorted()
        let middle = sorted.count / 2
        return sorted.count % 2 == 1 ? sorted[middle] : (sorted[middle - 1] + sorted[middle]) / 2
    }
}

/// Measures `body` in seconds (monotonic clock).
@inline(__always) func measure(_ body: () throws -> Void) rethrows -> Double {
    let start = DispatchTime.now().uptimeNanoseconds
    try body()
    return Double(DispatchTime.now().uptimeNanoseconds - start) / 1e9
}

@inline(__always) func now() -> UInt64 { DispatchTime.now().uptimeNanoseconds }
@inline(__always) func seconds(since start: UInt64) -> Double { Double(now() - start) / 1e9 }

/// One line of the report.
struct ReportRow: Codable {
    var id: String
    var summary: String
    var target: String
    var raw: Double?
    var grdb: Double?
    var contextStack: Double?
    var csOverRaw: Double?
    var csOverGRDB: Double?
    var met: Bool?
    var note: String
    var samples: [String: [Double]]
    var extras: [String: Double]
}

struct Report: Codable {
    var date: String
    var machine: String
    var n: Int
    var seconds: Double
    var rows: [ReportRow]
}

/// Runs workloads with interleaved repetitions: every repetition runs each contender once,
/// in turn, so that the machine's slow phases hit all of them alike.
@MainActor struct Runner {
    var contenders = Contender.allCases
    var log: (String) -> Void = { print($0) }

    func run(_ workload: any Workload) async throws -> ReportRow {
        if let reason = workload.unavailable {
            log("· \(workload.id): n/a (\(reason))")
            return ReportRow(id: workload.id, summary: workload.summary, target: workload.target, met: nil,
                             note: "n/a (\(reason))", samples: [:], extras: [:])
        }
        let start = now()
        log("· \(workload.id): preparing")
        try await workload.prepare()
        var result = WorkloadResult()
        for repetition in 0...workload.repetitions {
            for contender in contenders {
                guard let sample = try await workload.run(contender) else { continue }
                // Repetition 0 warms caches and code paths; it is not counted.
                if repetition > 0 { result.samples[contender, default: []].append(sample) }
            }
        }
        try await workload.finish()
        let verdict = workload.verdict(result)
        let raw = result.median(.raw), grdb = result.median(.grdb), cs = result.median(.contextStack)
        var extras: [String: Double] = [:]
        for contender in Contender.allCases {
            let keys = Set(result.samples[contender]?.flatMap(\.extra.keys) ?? [])
            for key in keys { extras["\(contender.rawValue).\(key)"] = result.median(contender, extra: key) }
        }
        let row = ReportRow(
            id: workload.id, summary: workload.summary, target: workload.target,
            raw: raw, grdb: grdb, contextStack: cs,
            csOverRaw: cs.flatMap { cs in raw.map { cs / $0 } },
            csOverGRDB: cs.flatMap { cs in grdb.map { cs / $0 } },
            met: verdict.met, note: verdict.note,
            samples: Dictionary(uniqueKeysWithValues: result.samples.map { ($0.key.rawValue, $0.value.map(\.seconds)) }),
            extras: extras)
        log("· \(workload.id): done in \(String(format: "%.1f", seconds(since: start))) s — \(verdict.note)")
        return row
    }
}

/// The table of medians.
enum Table {
    static func render(_ rows: [ReportRow]) -> String {
        // On the PostgreSQL rows (pg-…) raw is libpq and the peer is Fluent.
        let header = ["id", "raw", "GRDB/Fluent", "ContextStack", "CS/raw", "CS/peer", "target", "met", "notes"]
        var lines: [[String]] = [header]
        for row in rows {
            lines.append([
                row.id, time(row.raw), time(row.grdb), time(row.contextStack),
                ratio(row.csOverRaw), ratio(row.csOverGRDB), row.target,
                row.met.map { $0 ? "yes" : "NO" } ?? "—", row.note,
            ])
        }
        let widths = header.indices.map { column in lines.map { $0[column].count }.max() ?? 0 }
        func format(_ cells: [String]) -> String {
            "| " + cells.enumerated().map { $1.padding(toLength: widths[$0], withPad: " ", startingAt: 0) }.joined(separator: " | ") + " |"
        }
        var output = [format(header), "|" + widths.map { String(repeating: "-", count: $0 + 2) }.joined(separator: "|") + "|"]
        output += lines.dropFirst().map(format)
        return output.joined(separator: "\n")
    }

    static func time(_ seconds: Double?) -> String {
        guard let seconds else { return "—" }
        if seconds >= 1 { return String(format: "%.2f s", seconds) }
        if seconds >= 0.001 { return String(format: "%.1f ms", seconds * 1e3) }
        return String(format: "%.1f µs", seconds * 1e6)
    }

    static func ratio(_ value: Double?) -> String {
        value.map { String(format: "%.2f", $0) } ?? "—"
    }
}
