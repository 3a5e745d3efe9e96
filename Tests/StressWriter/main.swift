// A child process for the crash-safety and several-process tests (Tests/ContextStackTests/
// CrashSafetyTests.swift, SeveralProcessesTests.swift, PermissionTests.swift). Not a product:
// SwiftPM builds it beside the test bundle.
//
//     stress-writer batches <store|postgres-url> [grouped] [history]
//                                               commits numbered batches until killed
//     stress-writer history <store|postgres-url> <count>
//                                               says "ready", then makes one random commit
//                                               for each line on its input, saying what it did
//     stress-writer migrate <store>             opens the store with the next model version
//     stress-writer commits <store> <writer> <count>   says "ready", waits for a line on its
//                                                      input, commits <count> one-row commits
//     stress-writer create <store>              says "ready", waits for a line, then creates
//                                               (or opens) the store and commits one row
//     stress-writer two-stacks <store>          two stacks on one file, see `twoStacks`
//     stress-writer chaos <store> <writer>      two stacks on one file, committing numbered
//                                               batches through each in turn until killed
//     stress-writer open-close <store>          opens, reads and closes the store in a loop
//     stress-writer permissions <store>         adds the store, then commits one row; says
//                                               what each step did
//     stress-writer contend <postgres-url> <writer> <count> <policy>
//                                               says "ready", waits for a line, then makes
//                                               <count> commits that each add one to its own
//                                               property of a shared counter and to its total,
//                                               under <policy>;
//                                               prints "saved S conflicts C"
//
// A writer prints "begin N" before it commits batch N and "N" once that commit returned, so
// a test that kills it knows whether the kill landed while a commit was in flight.
import ContextStack
import ContextStackPostgres
import Foundation

@Entity(name: "Entry") final class Entry: ManagedObject {
    var batch: Int = 0
    var index: Int = 0
    var writer: Int = 0
}

/// The next version of `Entry`, for `migrate`: a new attribute and an index.
@Entity(name: "Entry") final class EntryV2: ManagedObject {
    @Attribute(.indexed) var batch: Int = 0
    var index: Int = 0
    var writer: Int = 0
    var note: String = "migrated"
}

@Entity(name: "Tally") final class Tally: ManagedObject {
    var entries: Int = 0
}

/// A counter the `contend` writers share: writer N adds to `wN` only, so under a policy that
/// keeps concurrent changes to different properties (`.objectTrump`, `.storeTrump`) no
/// addition may ever be lost, whoever wrote the counter in between.
@Entity(name: "Counter", unique: [["name"]]) final class Counter: ManagedObject {
    var name: String = ""
    var w0: Int = 0
    var w1: Int = 0
    var w2: Int = 0
    var w3: Int = 0
    /// What every writer adds to: only `.error` may keep every addition here.
    var total: Int = 0
}

/// The entries of one batch, all in one commit.
let batchSize = 10

func fail(_ message: String) -> Never {
    FileHandle.standardError.write(Data("stress-writer: \(message)\n".utf8))
    exit(2)
}

func say(_ line: String) {
    FileHandle.standardOutput.write(Data((line + "\n").utf8))
}

/// A stack on `url` with no root context: each commit is in SQLite when `commit()` returns.
func openStore(_ url: URL) throws -> (Stack, Context) {
    let stack = try Stack(model: Model(Entry.self, Tally.self), rootContext: .none)
    try stack.addDatabaseStore(at: url)
    return (stack, try Context(stack: stack, updateTarget: .persistentStore, updateOrder: .serial))
}

/// Commits one batch of `batchSize` entries of `writer` through `updater`.
func commitBatch(_ batch: Int, writer: Int, through updater: Context) throws {
    try updater.beginUpdateAndWait { update in
        for index in 0..<batchSize {
            let entry = try update.create(Entry.self)
            entry.batch = batch
            entry.index = index
            entry.writer = writer
        }
        try update.commit()
    }
}

/// The number after the highest batch of `writer` in the store.
func nextBatch(of writer: Int, in updater: Context) throws -> Int {
    try updater.beginUpdateAndWait { update in
        try update.fetchAll(Entry.self, %"writer" == writer, orderBy: .descending("batch"), options: .limit(1))
            .first.map { $0.batch + 1 } ?? 0
    }
}

let arguments = CommandLine.arguments
guard arguments.count >= 3 else { fail("usage: stress-writer <mode> <store> …") }
let url = URL(fileURLWithPath: arguments[2])

do {
    switch arguments[1] {
    case "migrate":
        // Opens the store with the next model version (migrating it), then says so.
        let stack = try Stack(model: Model(EntryV2.self, Tally.self), rootContext: .none)
        try stack.addDatabaseStore(at: url)
        say("migrated")

    case "batches":
        // `batches grouped`: commits go through the root writer, which groups those that
        // arrive while it writes into one transaction; a batch is printed once a flush saw it
        // saved. Otherwise there is no root: each commit is in SQLite when `commit()` returns.
        // `history`: the store tracks history.
        let grouped = arguments.dropFirst(3).contains("grouped")
        let stack = try Stack(model: Model(Entry.self, Tally.self), rootContext: grouped ? .shared : .none)
        if arguments[2].hasPrefix("postgres://"), let server = URL(string: arguments[2]) {
            try stack.addPostgresStore(url: server)
        } else {
            try stack.addDatabaseStore(at: url, tracksHistory: arguments.dropFirst(3).contains("history"))
        }
        let updater = try Context(stack: stack, updateTarget: grouped ? .rootContext(autoMerge: false) : .persistentStore,
                                  updateOrder: .serial)
        var next = try nextBatch(of: 0, in: updater)
        while true {
            let batch = next
            say("begin \(batch)")
            try updater.beginUpdateAndWait { update in
                for index in 0..<batchSize {
                    let entry = try update.create(Entry.self)
                    entry.batch = batch
                    entry.index = index
                }
                let tally = try update.fetchAll(Tally.self).first ?? update.create(Tally.self)
                tally.entries += batchSize
                try update.commit()
            }
            next += 1
            if grouped {
                guard next.isMultiple(of: 8) else { continue }
                try stack.flushAndWait()
                say((next - 8..<next).map(String.init).joined(separator: "\n"))
            } else {
                say("\(batch)")
            }
        }

    case "commits":
        guard arguments.count == 5, let writer = Int(arguments[3]), let count = Int(arguments[4]) else {
            fail("usage: stress-writer commits <store> <writer> <count>")
        }
        let (_, updater) = try openStore(url)
        // Both writers of the test start committing at once: each says it is ready, then
        // waits for the go on its standard input.
        say("ready")
        _ = readLine()
        for index in 0..<count {
            try updater.beginUpdateAndWait { update in
                let entry = try update.create(Entry.self)
                entry.writer = writer
                entry.index = index
                try update.commit()
            }
        }

    case "create":
        // Several of these start at the same moment on a file that does not exist yet.
        say("ready")
        _ = readLine()
        let (_, updater) = try openStore(url)
        try commitBatch(0, writer: Int(getpid()), through: updater)
        say("created")

    case "two-stacks":
        // Two stacks of one process on one file. The test opens and closes the file from
        // another process while this one holds it, then lets it commit more; every commit
        // acknowledged here must survive the SIGKILL that ends it.
        let (_, first) = try openStore(url)
        try commitBatch(0, writer: 1, through: first)
        let (_, second) = try openStore(url)
        try commitBatch(0, writer: 2, through: second)
        say("ready")
        _ = readLine()
        for batch in 1...10 {
            try commitBatch(batch, writer: 1, through: first)
            say("\(batch)")
        }
        say("done")
        _ = readLine()  // Until killed.

    case "chaos":
        // Two stacks on one file, committing in turn, until killed.
        guard arguments.count == 4, let writer = Int(arguments[3]) else { fail("usage: stress-writer chaos <store> <writer>") }
        let stacks = try [openStore(url), openStore(url)]
        var batch = try nextBatch(of: writer, in: stacks[0].1)
        while true {
            say("begin \(batch)")
            try commitBatch(batch, writer: writer, through: stacks[batch % 2].1)
            say("\(batch)")
            batch += 1
        }

    case "history":
        // Random inserts, updates and deletes of entries, one commit at a time, in lockstep
        // with the test: says "ready", then after each line on its input makes one commit and
        // prints what it did, "commit N ins=1,2 upd=3 del=4" (primary keys). `count` commits.
        guard arguments.count == 4, let count = Int(arguments[3]) else { fail("usage: stress-writer history <store> <count>") }
        let stack = try Stack(model: Model(Entry.self, Tally.self), rootContext: .none)
        if arguments[2].hasPrefix("postgres://"), let server = URL(string: arguments[2]) {
            try stack.addPostgresStore(url: server)
        } else {
            try stack.addDatabaseStore(at: url, tracksHistory: true)
        }
        let updater = try Context(stack: stack, updateTarget: .persistentStore, author: "writer-\(getpid())")
        var alive: [ObjectID] = []
        var random = SystemRandomNumberGenerator()
        say("ready")
        for number in 0..<count {
            guard readLine() != nil else { break }
            let (inserted, updated, deleted) = try updater.beginUpdateAndWait { update -> ([ObjectID], [ObjectID], [ObjectID]) in
                var inserted: [ObjectID] = [], updated: [ObjectID] = [], deleted: [ObjectID] = []
                for _ in 0..<Int.random(in: 0...3, using: &random) {
                    let entry = try update.create(Entry.self)
                    entry.index = number
                    inserted.append(entry.objectID)
                }
                for id in alive.shuffled(using: &random).prefix(Int.random(in: 0...2, using: &random)) {
                    guard let entry = try update.fetch(Entry.self, id: id) else { fail("entry \(id) is gone") }
                    entry.batch += 1
                    updated.append(id)
                }
                if Bool.random(using: &random), let id = alive.filter({ !updated.contains($0) }).randomElement(using: &random) {
                    guard let entry = try update.fetch(Entry.self, id: id) else { fail("entry \(id) is gone") }
                    try update.delete(entry)
                    deleted.append(id)
                }
                if inserted.isEmpty && updated.isEmpty && deleted.isEmpty {
                    // Every commit changes something, so each one is a transaction.
                    let entry = try update.create(Entry.self)
                    entry.index = number
                    inserted.append(entry.objectID)
                }
                try update.commit()
                return (inserted, updated, deleted)
            }
            alive = alive.filter { !deleted.contains($0) } + inserted
            func keys(_ ids: [ObjectID]) -> String { ids.map { String($0.primaryKey) }.joined(separator: ",") }
            say("commit \(number) ins=\(keys(inserted)) upd=\(keys(updated)) del=\(keys(deleted))")
        }
        say("done")

    case "open-close":
        // Another process that opens the file, reads and closes it, again and again.
        while true {
            let (_, reader) = try openStore(url)
            let count = try reader.beginUpdateAndWait { try $0.fetchCount(Entry.self) }
            say("read \(count)")
        }

    case "contend":
        guard arguments.count == 6, let server = URL(string: arguments[2]), let writer = Int(arguments[3]), (0..<4).contains(writer),
              let count = Int(arguments[4]) else {
            fail("usage: stress-writer contend <postgres-url> <writer 0-3> <count> <policy>")
        }
        let policies: [String: MergePolicy] = ["objectTrump": .objectTrump, "storeTrump": .storeTrump, "overwrite": .overwrite,
                                               "rollback": .rollback, "error": .error]
        guard let policy = policies[arguments[5]] else { fail("unknown policy \(arguments[5])") }
        let stack = try Stack(model: Model(Entry.self, Tally.self, Counter.self), rootContext: .none)
        try stack.addPostgresStore(url: server)
        let updater = try Context(stack: stack, updateTarget: .persistentStore, updateOrder: .serial, mergePolicy: policy)
        let keys: [ReferenceWritableKeyPath<Counter, Int>] = [\.w0, \.w1, \.w2, \.w3]
        say("ready")
        _ = readLine()
        var saved = 0
        var conflicts = 0
        var random = SystemRandomNumberGenerator()
        for index in 0..<count {
            let name = "c\(Int.random(in: 0..<4, using: &random))"
            do {
                try updater.beginUpdateAndWait { update in
                    guard let counter = try update.fetch(Counter.self, %"name" == name) else { fail("no counter \(name)") }
                    counter[keyPath: keys[writer]] += 1
                    counter.total += 1
                    let entry = try update.create(Entry.self)
                    entry.writer = writer
                    entry.index = index
                    try update.commit()
                }
                saved += 1
            } catch is MergeConflictError {
                conflicts += 1
            }
        }
        say("saved \(saved) conflicts \(conflicts)")

    case "permissions":
        // Run as an unprivileged user by PermissionTests: what adding the store, and then
        // writing to it, does.
        let stack = try Stack(model: Model(Entry.self, Tally.self), rootContext: .none)
        do {
            try stack.addDatabaseStore(at: url)
        } catch let error as StoreError {
            say("add: \(error.code)")
            exit(0)
        }
        say("add: ok")
        let updater = try Context(stack: stack, updateTarget: .persistentStore)
        do {
            try commitBatch(0, writer: 0, through: updater)
            say("commit: ok")
        } catch {
            say("commit: \(error)")
        }

    default:
        fail("unknown mode \(arguments[1])")
    }
} catch {
    fail("\(error)")
}
