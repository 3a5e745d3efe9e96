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
}
