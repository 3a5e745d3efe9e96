@testable import ContextStack
import _ContextStackCore
@testable import _ContextStackModel
import _ContextStackSQLite
@testable import _ContextStackSQLiteStore
import Dispatch
import Foundation
import Testing

@Suite(.timeLimit(.minutes(5))) struct UpdateOrderTests {
    /// Blocks performed on a long-lived serial context while it waits for its turn run after
    /// the turn comes, in order, and never alongside another update of the same context.
    @Test @MainActor func aSerialContextWaitingForItsTurnKeepsItsBlocksInOrder() async throws {
        let store = try TestStore(.memory)
        let world = try MainContext(stack: store.stack, updateOrder: .serial)
        let log = Locked<[String]>([])
        let release = Self.anUpdateHoldingTheTurn(of: world, log: log)
        let context = world.beginUpdateContext()
        await withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in
            context.perform { _ in log.withLock { $0.append("A") } }
            context.perform { _ in
                log.withLock { $0.append("B") }
                done.resume()
            }
            release.signal()
        }
        #expect(log.withLock { $0 } == ["other", "other done", "A", "B"])
    }

    /// Docs/Concurrency.md, "Update order": `.serial` orders `transaction` as it orders
    /// `beginUpdate`. A transaction started while another update holds the turn runs once
    /// that update is done: given time to run meanwhile, it does not.
    @Test @MainActor func aSerialContextsTransactionWaitsForTheTurn() async throws {
        let store = try TestStore(.memory)
        let world = try MainContext(stack: store.stack, updateOrder: .serial)
        let log = Locked<[String]>([])
        let release = Self.anUpdateHoldingTheTurn(of: world, log: log)
        let transaction = Task { try await world.transaction { _ in log.withLock { $0.append("T") } } }
        for _ in 0..<50 where log.withLock({ !$0.contains("T") }) { try await Task.sleep(for: .milliseconds(10)) }
        #expect(log.withLock { $0 } == ["other"])
        release.signal()
        try await transaction.value
        #expect(log.withLock { $0 } == ["other", "other done", "T"])
    }

    /// Starts an update on `world` that logs "other", holds the turn until the returned
    /// semaphore is signalled, then logs "other done"; returns once the update holds the turn.
    @MainActor static func anUpdateHoldingTheTurn(of world: MainContext, log: Locked<[String]>) -> DispatchSemaphore {
        let release = DispatchSemaphore(value: 0)
        let holding = DispatchSemaphore(value: 0)
        world.beginUpdate { _ in
            log.withLock { $0.append("other") }
            holding.signal()
            release.wait()
            log.withLock { $0.append("other done") }
        }
        holding.wait()
        return release
    }

    /// Two update blocks of one context meet inside: only possible if they run concurrently.
    @Test @MainActor func defaultOrderRunsUpdatesConcurrently() async throws {
        let store = try TestStore(.memory)
        let world = try MainContext(stack: store.stack)
        #expect(await Self.updatesThatMeet(world.beginUpdate, world.beginUpdate) == 2)
    }

    /// Docs/Concurrency.md, "Update order": updates started from different contexts are never
    /// ordered against each other, even when both contexts are `.serial`: an update of each
    /// meets the other inside.
    @Test @MainActor func twoSerialContextsUpdatesAreNotOrderedAgainstEachOther() async throws {
        let store = try TestStore(.memory)
        let world = try MainContext(stack: store.stack, updateOrder: .serial)
        let other = try Context(stack: store.stack, updateOrder: .serial)
        #expect(await Self.updatesThatMeet(world.beginUpdate, other.beginUpdate) == 2)
    }

    /// Starts an update with each of `first` and `second`, each of which waits inside for the
    /// other to start; returns how many met the other (2 when they ran concurrently; the
    /// timeout only keeps a failure from hanging the run).
    @MainActor static func updatesThatMeet(_ first: (@escaping @Sendable (Update) throws -> Void) -> Void,
                                           _ second: (@escaping @Sendable (Update) throws -> Void) -> Void) async -> Int {
        let started = (DispatchSemaphore(value: 0), DispatchSemaphore(value: 0))
        let met = Locked(0)
        await withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in
            let finished = Locked(0)
            @Sendable func finish() { if finished.withLock({ $0 += 1; return $0 }) == 2 { done.resume() } }
            first { _ in
                started.0.signal()
                if started.1.wait(timeout: .now() + 30) == .success { met.withLock { $0 += 1 } }
                finish()
            }
            second { _ in
                started.1.signal()
                if started.0.wait(timeout: .now() + 30) == .success { met.withLock { $0 += 1 } }
                finish()
            }
        }
        return met.withLock { $0 }
    }

    @Test @MainActor func serialOrderRunsOneUpdateAtATimeIncludingItsContinuations() async throws {
        let store = try TestStore(.memory)
        let world = try MainContext(stack: store.stack, updateOrder: .serial)
        let log = Locked<[String]>([])
        let inside = Locked(0)
        let maximum = Locked(0)
        @Sendable func enter(_ name: String) {
            let now = inside.withLock { $0 += 1; return $0 }
            maximum.withLock { $0 = max($0, now) }
            log.withLock { $0.append(name) }
        }
        @Sendable func leave() { inside.withLock { $0 -= 1 } }
        await withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in
            world.beginUpdate { update in
                enter("A")
                update.perform { _ in
                    enter("A-continued")
                    Thread.sleep(forTimeInterval: 0.01)
                    leave()
                }
                leave()
            }
            world.beginUpdate { _ in
                enter("B")
                leave()
                done.resume()
            }
        }
        #expect(log.withLock { $0 } == ["A", "A-continued", "B"])
        #expect(maximum.withLock { $0 } == 1)
    }

    /// Docs/Concurrency.md, "Serial": a long-lived context takes the turn for each block and
    /// gives it back between them, so another update runs between two of its blocks (holding
    /// it, the update in between would wait for ever: the test gives up after a minute).
    @Test @MainActor func aLongLivedContextGivesTheTurnBackBetweenItsBlocks() throws {
        let store = try TestStore(.memory)
        let world = try MainContext(stack: store.stack, updateOrder: .serial)
        let lived = world.beginUpdateContext()
        @Sendable nonisolated func add(_ name: String, in update: Update) throws {
            try update.create(Pet.self).name = name
            try update.commit()
        }
        try lived.performAndWait { try add("first", in: $0) }
        let between = DispatchSemaphore(value: 0)
        world.beginUpdate { update in
            try add("between", in: update)
            between.signal()
        }
        try #require(between.wait(timeout: .now() + 60) == .success, "the update in between never ran")
        try lived.performAndWait { try add("second", in: $0) }
        #expect(try world.fetchAll(Pet.self, orderBy: .ascending("name")).map(\.name) == ["between", "first", "second"])
    }

    @Test @MainActor func aLeakedUpdateDoesNotWedgeTheLine() async throws {
        let store = try TestStore(.memory)
        let world = try MainContext(stack: store.stack, updateOrder: .serial)
        let leaked = Locked<Update?>(nil)
        try world.beginUpdateAndWait { update in leaked.withLock { $0 = update } }
        try world.beginUpdateAndWait { update in
            try update.create(Pet.self)
            try update.commit()
        }
        #expect(try world.fetchCount(Pet.self) == 1)
        // The leaked handle can still continue later: it takes a turn again.
        await withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in
            leaked.withLock { $0 }?.perform { update in
                try update.create(Pet.self)
                try update.commit()
                done.resume()
            }
        }
        #expect(try world.fetchCount(Pet.self) == 2)
    }

    @Test func beginUpdateAndWaitInsideOwnSerialUpdateTraps() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            try await MainActor.run {
                let store = try TestStore(.memory)
                let world = try MainContext(stack: store.stack, updateOrder: .serial)
                try world.beginUpdateAndWait { _ in
                    try world.beginUpdateAndWait { _ in }
                }
            }
        }
        expectTrapMessage(result, contains: "updateOrder is .serial", "use beginUpdate { } to run it after")
    }

    @Test @MainActor func nestedWaitsAreFineInDefaultOrder() throws {
        let store = try TestStore(.memory)
        let world = try MainContext(stack: store.stack)
        try world.beginUpdateAndWait { _ in
            try world.beginUpdateAndWait { update in
                try update.create(Pet.self)
                try update.commit()
            }
        }
        #expect(try world.fetchCount(Pet.self) == 1)
    }
}
