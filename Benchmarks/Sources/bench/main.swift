// The benchmark: raw SQLite, GRDB and ContextStack doing the same jobs on the same data.
//
//     swift run -c release --package-path Benchmarks bench [--n 100000] [--json out.json] [--only insert,fetch]
//
// See Docs/Performance.md for what each workload measures and the latest table.
import BenchSQLite
import Foundation

let options = Options.parse(Array(CommandLine.arguments.dropFirst()))
let started = now()
let fixture = try Fixture(n: options.n)

func reps(_ standard: Int) -> Int { options.repetitions ?? standard }

let postgres = try options.postgres.map { try PostgresFixture(url: $0, fixture: fixture) }
let workloads: [any Workload] = postgres.map { postgres in [
    PostgresInsertWorkload(postgres, repetitions: reps(5)),
    PostgresFetchWorkload(postgres, repetitions: reps(9)),
    PostgresSaveOneWorkload(postgres, repetitions: reps(9)),
    PostgresHistoryLatencyWorkload(postgres, repetitions: reps(5)),
] } ?? [
    InsertWorkload(fixture, repetitions: reps(5)),
    FetchWorkload(fixture, repetitions: reps(9)),
    SnapshotsWorkload(fixture, repetitions: reps(9)),
    FilterWorkload(fixture, repetitions: reps(5)),
    AggregateWorkload(fixture, repetitions: reps(5)),
    UpdateWorkload(fixture, repetitions: reps(7)),
    LookupWorkload(fixture, repetitions: reps(7)),
    SaveOneWorkload(fixture, repetitions: reps(9)),
    ConcurrentWorkload(fixture, repetitions: reps(5)),
    ServerWorkload(fixture, repetitions: reps(5)),
    TextPrefixWorkload(fixture, repetitions: reps(5)),
    TextContainsWorkload(fixture, repetitions: reps(5)),
    UpsertWorkload(fixture, repetitions: reps(5)),
    MergeWorkload(fixture, repetitions: reps(5)),
    LiveWorkload(fixture, repetitions: reps(7)),
    MemoryWorkload(fixture, repetitions: reps(1)),
    HistoryLatencyWorkload(fixture, repetitions: reps(5)),
    HistoryCostWorkload(fixture, repetitions: reps(5)),
]
if let only = options.only {
    let known = Set(workloads.map(\.id))
    if let unknown = only.subtracting(known).first {
        FileHandle.standardError.write(Data("bench: unknown workload \(unknown); known: \(workloads.map(\.id).joined(separator: ", "))\n".utf8))
        exit(2)
    }
}

let machine = Machine.describe()
let date = ISO8601DateFormatter().string(from: Date())
print("ContextStack benchmark — N = \(options.n), \(date)")
print("\(machine); SQLite \(String(cString: sqlite3_libversion()))")
print("Medians of interleaved repetitions after one warm-up each.\n")

var rows: [ReportRow] = []
let runner = Runner(contenders: options.contenders)
do {
    for workload in workloads where options.only?.contains(workload.id) ?? true {
        rows.append(try await runner.run(workload))
    }
} catch {
    fixture.removeAll()
    await postgres?.removeAll()
    FileHandle.standardError.write(Data("bench: \(error)\n".utf8))
    exit(1)
}
fixture.removeAll()
await postgres?.removeAll()

let total = seconds(since: started)
print("")
print(Table.render(rows))
print(String(format: "\nTotal %.0f s.", total))

if let path = options.json {
    let report = Report(date: date, machine: machine, n: options.n, seconds: total, rows: rows)
    let encoder = JSONEncoder()
    encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
    try encoder.encode(report).write(to: URL(fileURLWithPath: path))
    print("Wrote \(path).")
}
