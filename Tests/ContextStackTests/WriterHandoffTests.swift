@testable import ContextStack
import _ContextStackCore
@testable import _ContextStackModel
import _ContextStackSQLite
@testable import _ContextStackSQLiteStore
import Foundation
import Testing

/// A committer that waits for its own write (`.persistentStore`) drains the writer queue
/// inline, but only up to its own commit: what queued behind it is handed to the background
/// writer, not left waiting for the next commit.
@Suite struct WriterHandoffTests {
    @Test(.timeLimit(.minutes(5))) @MainActor
    func commitsQueuedBehindAnInlineWriterAreStillWritten() async throws {
        let store = try TestStore(.file)
        let world = try MainContext(stack: store.stack)
        let durable = try Context(stack: store.stack, updateTarget: .persistentStore)
        // Reserve keys now: reserving more would need the writer, which the test holds below.
        try world.beginUpdateAndWait { update in
            try update.create(Person.self).name = "seed"
            try update.commit()
        }
        try await store.stack.flush()
        // The background writer may still be finishing its loop after flush returned.
        while store.stack.sqliteStore.state.withLock({ $0.isDraining }) { try await Task.sleep(for: .milliseconds(1)) }
        let started = DispatchSemaphore(value: 0)
        let finished = DispatchSemaphore(value: 0)
        try store.stack.sqliteStore.writer.withLock { _ in
            // A: waits for its write, so it drains inline — and blocks on the writer we hold.
            DispatchQueue.global().async {
                started.signal()
                try? durable.beginUpdateAndWait { update in
                    try update.create(Person.self).name = "inline"
                    try update.commit()
                }
                finished.signal()
            }
            started.wait()
            while !store.stack.sqliteStore.state.withLock({ $0.isDraining && $0.queue.isEmpty }) { Thread.sleep(forTimeInterval: 0.001) }
            // B: queued behind A's batch while A drains.
            try world.beginUpdateAndWait { update in
                try update.create(Person.self).name = "queued"
                try update.commit()
            }
            #expect(store.stack.sqliteStore.state.withLock { $0.queue.count } == 1)
        }
        finished.wait()
        // Without the handoff, B would wait for a commit that never comes, and flush with it.
        try await store.stack.flush()
        let names = try store.rawConnection().rows("SELECT name FROM Person ORDER BY name").map { $0[0] }
        #expect(names == [.text("inline"), .text("queued"), .text("seed")])
    }

    /// Docs/Topologies.md, "Three-tier without root": a commit made while another thread is
    /// writing waits behind it (that thread stops at its own commit, and the store's writer
    /// queue writes this one), and each `commit()` returns once its own row is in SQLite.
    @Test(.timeLimit(.minutes(5)))
    func onAStackWithoutARootACommitBehindAnotherReturnsOnceWritten() throws {
        let store = try TestStore(.file, rootContext: .none)
        let context = try Context(stack: store.stack, updateTarget: .persistentStore)
        // Reserve keys now: reserving more would need the writer, which the test holds below.
        try context.beginUpdateAndWait { update in
            try update.create(Person.self).name = "seed"
            try update.commit()
        }
        let sqlite = store.stack.sqliteStore
        let done = DispatchSemaphore(value: 0)
        let storedOnReturn = Locked<[String: Value]>([:])
        func commit(_ name: String) {
            DispatchQueue.global().async {
                do {
                    try context.beginUpdateAndWait { update in
                        try update.create(Person.self).name = name
                        try update.commit()
                    }
                    let stored = try store.writtenScalar("SELECT count(*) FROM Person WHERE name = '\(name)'")
                    storedOnReturn.withLock { $0[name] = stored }
                } catch {
                    Issue.record(error)
                }
                done.signal()
            }
        }
        sqlite.writer.withLock { _ in
            // A drains inline, and blocks on the writer the test holds, its commit taken.
            commit("A")
            while !sqlite.state.withLock({ $0.lastSequence == 2 && $0.isDraining && $0.queue.isEmpty }) { Thread.sleep(forTimeInterval: 0.001) }
            // B queues behind A's batch.
            commit("B")
            while sqlite.state.withLock({ $0.queue.count }) < 1 { Thread.sleep(forTimeInterval: 0.001) }
        }
        done.wait()
        done.wait()
        #expect(storedOnReturn.withLock { $0 } == ["A": .integer(1), "B": .integer(1)])
    }

    /// Docs/Topologies.md, "updateTarget: .persistentStore": on a stack with a root, such a
    /// commit joins the queue behind the commits the root accepted, and `commit()` returns once
    /// those and it are written, so commits reach SQLite in the order they were made.
    @Test(.timeLimit(.minutes(5))) @MainActor
    func aPersistentStoreCommitIsWrittenAfterTheCommitsTheRootAcceptedBeforeIt() async throws {
        let store = try TestStore(.file)
        let world = try MainContext(stack: store.stack)
        let durable = try Context(stack: store.stack, updateTarget: .persistentStore)
        let ann = try world.beginUpdateAndWait { update in
            let ann = try update.create(Person.self)
            ann.name = "Ann"
            try update.commit()
            return ann.objectID
        }
        try await store.stack.flush()
        while store.stack.sqliteStore.state.withLock({ $0.isDraining }) { try await Task.sleep(for: .milliseconds(1)) }
        let storedOnReturn = Locked<[[Value]]?>(nil)
        try store.holdingTheWriter {
            for age in [1, 2] {
                try world.beginUpdateAndWait { update in
                    try #require(try update.fetch(Person.self, id: ann)).age = age
                    try update.commit()
                }
            }
            DispatchQueue.global().async {
                do {
                    try durable.beginUpdateAndWait { update in
                        try #require(try update.fetch(Person.self, id: ann)).location = "Kyoto"
                        try update.commit()
                    }
                    let stored = try store.writtenRows("SELECT age, location FROM Person WHERE name = 'Ann'")
                    storedOnReturn.withLock { $0 = stored }
                } catch {
                    Issue.record(error)
                    storedOnReturn.withLock { $0 = [] }
                }
            }
            // Handed over: the seed, the two ages, and the durable commit, which now waits.
            while store.stack.sqliteStore.state.withLock({ $0.lastSequence }) < 4 { Thread.sleep(forTimeInterval: 0.001) }
        }
        while storedOnReturn.withLock({ $0 }) == nil { try await Task.sleep(for: .milliseconds(5)) }
        #expect(storedOnReturn.withLock { $0 } == [[.integer(2), .text("Kyoto")]],
                "when commit() returned, the two commits the root accepted before it were written too")
    }
}
