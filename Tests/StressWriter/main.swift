// A child process for the crash-safety and two-process tests (Tests/ContextStackTests/
// CrashSafetyTests.swift). Not a product: SwiftPM builds it beside the test bundle.
//
//     stress-writer batches <store> [grouped]  commits numbered batches until killed
//     stress-writer migrate <store>            opens the store with the next model version
//     stress-writer commits <store> <writer> <count>   says "ready", waits for a line on its
//                                                      input, commits <count> one-row commits
//
// `batches` prints each batch number once its commit returned; the test kills the process with
// SIGKILL at a random moment and checks that every batch is wholly present or wholly absent,
// and that every printed batch is present.
import ContextStack
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

/// The entries of one batch, all in one commit.
let batchSize = 10

func fail(_ message: String) -> Never {
    FileHandle.standardError.write(Data("stress-writer: \(message)\n".utf8))
    exit(2)
}

let arguments = CommandLine.arguments
guard arguments.count >= 3 else { fail("usage: stress-writer batches <store> | commits <store> <writer> <count>") }
let url = URL(fileURLWithPath: arguments[2])

if arguments[1] == "migrate" {
    // Opens the store with the next model version (migrating it), then says so.
    do {
        let stack = try Stack(model: Model(EntryV2.self, Tally.self), rootContext: .none)
        try stack.addDatabaseStore(at: url)
        FileHandle.standardOutput.write(Data("migrated\n".utf8))
        exit(0)
    } catch {
        fail("\(error)")
    }
}

do {
    // `batches grouped`: commits go through the root writer, which groups those that arrive
    // while it writes into one transaction; a batch is printed once a flush saw it saved.
    // Otherwise there is no root: each commit is in SQLite when `commit()` returns.
    let grouped = arguments.count > 3 && arguments[3] == "grouped"
    let stack = try Stack(model: Model(Entry.self, Tally.self), rootContext: grouped ? .shared : .none)
    try stack.addDatabaseStore(at: url)
    let updater = try Context(stack: stack, updateTarget: grouped ? .rootContext(autoMerge: false) : .persistentStore,
                              updateOrder: .serial)
    switch arguments[1] {
    case "batches":
        var next = try updater.beginUpdateAndWait { update in
            try update.fetchAll(Entry.self, orderBy: .descending("batch"), options: .limit(1)).first.map { $0.batch + 1 } ?? 0
        }
        while true {
            let batch = next
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
                FileHandle.standardOutput.write(Data((next - 8..<next).map { "\($0)\n" }.joined().utf8))
            } else {
                FileHandle.standardOutput.write(Data("\(batch)\n".utf8))
            }
        }
    case "commits":
        guard arguments.count == 5, let writer = Int(arguments[3]), let count = Int(arguments[4]) else {
            fail("usage: stress-writer commits <store> <writer> <count>")
        }
        // Both writers of the test start committing at once: each says it is ready, then
        // waits for the go on its standard input.
        FileHandle.standardOutput.write(Data("ready\n".utf8))
        _ = readLine()
        for index in 0..<count {
            try updater.beginUpdateAndWait { update in
                let entry = try update.create(Entry.self)
                entry.writer = writer
                entry.index = index
                try update.commit()
            }
        }
    default:
        fail("unknown mode \(arguments[1])")
    }
} catch {
    fail("\(error)")
}
