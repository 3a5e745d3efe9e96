import Foundation

/// `bench [--n 100000] [--json out.json] [--only id,id] [--reps k]`
struct Options {
    var n = 100_000
    var json: String?
    var only: Set<String>?
    var repetitions: Int?
    /// Only these contenders (for profiling one of them); all by default.
    var contenders = Contender.allCases
    /// A PostgreSQL server to run the PostgreSQL workloads on (instead of SQLite's).
    var postgres: String?

    static let usage = """
        usage: bench [--n N] [--json FILE] [--only ID,ID,...] [--reps K] [--contenders raw,grdb,cs]
          --n      objects in the data set (default 100000)
          --json   also write the figures to FILE
          --only   run only these workloads (insert, fetch, filter, aggregate, update, lookup,
                   save1, concurrent, merge, live, memory)
          --reps   timed repetitions per workload, after one warm-up (default: per workload)
          --contenders  run only these (for profiling one under valgrind): raw, grdb, cs
          --postgres URL  run the PostgreSQL workloads (pg-insert, pg-fetch, pg-save1) on the
                   database URL names, in schemas bench_raw and bench_cs it creates and drops
        """

    static func parse(_ arguments: [String]) -> Options {
        var options = Options()
        var iterator = arguments.makeIterator()
        func value(_ flag: String) -> String {
            guard let value = iterator.next() else { fail("\(flag) needs a value") }
            return value
        }
        while let argument = iterator.next() {
            switch argument {
            case "--n":
                guard let n = Int(value(argument)), n >= 1000 else { fail("--n needs a whole number of at least 1000") }
                options.n = n
            case "--json":
                options.json = value(argument)
            case "--only":
                options.only = Set(value(argument).split(separator: ",").map { String($0) })
            case "--reps":
                guard let reps = Int(value(argument)), reps >= 1 else { fail("--reps needs a whole number of at least 1") }
                options.repetitions = reps
            case "--contenders":
                options.contenders = value(argument).split(separator: ",").map { name in
                    switch name {
                    case "raw": .raw
                    case "grdb": .grdb
                    case "cs": .contextStack
                    default: fail("unknown contender \(name): use raw, grdb or cs")
                    }
                }
            case "--postgres":
                options.postgres = value(argument)
            case "--help", "-h":
                print(usage)
                exit(0)
            default:
                fail("unknown argument \(argument)")
            }
        }
        return options
    }

    private static func fail(_ message: String) -> Never {
        FileHandle.standardError.write(Data("bench: \(message)\n\(usage)\n".utf8))
        exit(2)
    }
}
