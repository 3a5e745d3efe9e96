@testable import ContextStack
import _ContextStackCore
@testable import _ContextStackModel
import _ContextStackSQLite
import _ContextStackPostgres
@testable import _ContextStackSQLiteStore
import Foundation
import Testing
#if canImport(Glibc)
import Glibc
#endif

@Suite struct TerminationTests {
    /// Where the child process of an exit test writes: derived from the parent's PID and the
    /// case, so both sides find it without sharing state, and parallel cases do not meet.
    static func storeURL(parent: pid_t, signal: Int32, flushes: Bool) -> URL {
        FileManager.default.temporaryDirectory
            .appendingPathComponent("ContextStackTests-termination-\(parent)-\(signal)-\(flushes).sqlite")
    }

    /// A three-tier commit returns before the root writes it. With `flushesOnTermination`, a
    /// SIGTERM or SIGINT right after it waits for the write and then ends the process with the
    /// signal; without it (the control), the signal ends the process at once and the commit is
    /// lost — which shows that the flush, and not luck, kept it.
    ///
    /// The child holds the root writer's connection while the signal arrives, so the commit
    /// cannot have been written before it, whatever the timing. The child kills itself with
    /// SIGALRM after a minute, so a hang fails the test instead of stalling the suite.
    @Test(arguments: [SIGTERM, SIGINT], [true, false])
    func aSignalRightAfterAThreeTierCommit(signal: Int32, flushes: Bool) async throws {
        let url = Self.storeURL(parent: getpid(), signal: signal, flushes: flushes)
        defer { Self.remove(url) }
        await #expect(processExitsWith: .signal(signal)) { [signal, flushes] in
            try await TerminationTests.commitWhileTheWriterIsHeld(at: TerminationTests.storeURL(parent: getppid(), signal: signal, flushes: flushes)) { stack in
                if flushes { stack.flushesOnTermination = true }
            }
            kill(getpid(), signal)
            while true { sleep(1) }
        }
        #expect(try await Self.storedPets(at: url) == (flushes ? 20_000 : 0))
    }

    /// Docs/Topologies.md, "Flushing when the process ends": a normal exit (`exit`) flushes
    /// too, through `atexit`; without the setting (the control) the commit is lost.
    @Test(arguments: [true, false])
    func anExitRightAfterAThreeTierCommit(flushes: Bool) async throws {
        let url = Self.storeURL(parent: getpid(), signal: 0, flushes: flushes)
        defer { Self.remove(url) }
        await #expect(processExitsWith: .success) { [flushes] in
            try await TerminationTests.commitWhileTheWriterIsHeld(at: TerminationTests.storeURL(parent: getppid(), signal: 0, flushes: flushes)) { stack in
                if flushes { stack.flushesOnTermination = true }
            }
            exit(0)
        }
        #expect(try await Self.storedPets(at: url) == (flushes ? 20_000 : 0))
    }

    /// The same page: a stack whose setting was turned back off is not flushed by the
    /// handlers, which stay installed; the signal still ends the process.
    @Test func aStackTurnedBackOffIsNotFlushedOnASignal() async throws {
        let url = Self.storeURL(parent: getpid(), signal: SIGTERM, flushes: false).appendingPathExtension("off")
        defer { Self.remove(url) }
        await #expect(processExitsWith: .signal(SIGTERM)) {
            let url = TerminationTests.storeURL(parent: getppid(), signal: SIGTERM, flushes: false).appendingPathExtension("off")
            try await TerminationTests.commitWhileTheWriterIsHeld(at: url) { stack in
                stack.flushesOnTermination = true
                stack.flushesOnTermination = false
            }
            kill(getpid(), SIGTERM)
            while true { sleep(1) }
        }
        #expect(try await Self.storedPets(at: url) == 0)
    }

    /// What the termination flush writes includes commits handed over while it waits: other
    /// threads may still be committing, their callers answered. Here a commit, B, comes after
    /// the flush began waiting for the one before, Ann's, which the writer had taken; B takes half
    /// a second to write (a trigger sleeps). The flush returns only once both are written.
    /// Before, it returned after Ann's, with B still on its way. (PostgreSQL: SQLite has no sleep.)
    @Test(.enabled(if: StoreKind.available.contains(.postgres)))
    func theFlushOnTerminationAlsoWritesWhatIsCommittedWhileItWaits() throws {
        let store = try TestStore(.postgres)
        let queued = try #require(store.stack.store as? any QueuedStore)
        let context = try Context(stack: store.stack, updateTarget: .rootContext(autoMerge: false))
        let ann = try context.commitPerson(named: "Ann")
        try store.stack.flushAndWait()
        try PostgresConnection(PostgresSettings(url: try #require(store.database).url)).execute("""
            CREATE FUNCTION "slow_b"() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN PERFORM pg_sleep(0.5); RETURN NEW; END $$;
            CREATE TRIGGER "slow_b" BEFORE INSERT ON "Person" FOR EACH ROW WHEN (NEW.name = 'B') EXECUTE FUNCTION "slow_b"()
            """)
        let release = try store.holdTheWriterFromOutside(locking: ann)
        try context.beginUpdateAndWait { update in
            try #require(try update.fetch(Person.self, id: ann)).age = 1
            try update.commit()
        }
        for _ in 0..<60_000 where !queued.state.withLock({ $0.queue.isEmpty }) { usleep(1_000) }
        try #require(queued.state.withLock { $0.queue.isEmpty }, "the writer took Ann's commit and waits")
        let stored = Locked<[[Value]]>([])
        let flushed = DispatchSemaphore(value: 0)
        Thread {
            TerminationFlusher.flush(store.stack)
            stored.withLock { $0 = (try? store.writtenRows("SELECT name, age FROM \"Person\" ORDER BY name")) ?? [] }
            flushed.signal()
        }.start()
        for _ in 0..<60_000 where queued.state.withLock({ $0.waiters.isEmpty }) { usleep(1_000) }
        try #require(!queued.state.withLock { $0.waiters.isEmpty }, "the flush waits for Ann's commit")
        _ = try context.commitPerson(named: "B")
        try release()
        flushed.wait()
        #expect(stored.withLock { $0 } == [[.text("Ann"), .integer(1)], [.text("B"), .integer(0)]], "stored when the flush returned")
    }

    /// In the child: a stack on `url`, set up by `configure`, and a three-tier commit of 20,000
    /// pets that the root cannot write for half a second (the child holds the writer's
    /// connection from before the commit on), so that whatever ends the process next meets it
    /// unwritten. The child kills itself with SIGALRM after a minute, so a hang fails the test
    /// instead of stalling the suite.
    static func commitWhileTheWriterIsHeld(at url: URL, configure: @MainActor (Stack) -> Void) async throws {
        alarm(60)
        try await MainActor.run {
            let stack = try Stack(model: Model(Person.self, Pet.self))
            try stack.addDatabaseStore(at: url)
            configure(stack)
            let world = try MainContext(stack: stack)
            try world.beginUpdateAndWait { update in
                for index in 0..<20_000 { try update.create(Pet.self).age = index }
                let held = DispatchSemaphore(value: 0)
                Thread {
                    stack.sqliteStore.writer.withLock { _ in
                        held.signal()
                        usleep(500_000)
                    }
                }.start()
                held.wait()
                try update.commit()
            }
            // The stack and its context must outlive this function, as they would in an app:
            // only the end of the (child) process ends them.
            _ = Unmanaged.passRetained(stack)
            _ = Unmanaged.passRetained(world)
        }
    }

    /// How many pets the file at `url` holds, read by a fresh stack.
    static func storedPets(at url: URL) async throws -> Int {
        let stack = try Stack(model: Model(Person.self, Pet.self))
        try stack.addDatabaseStore(at: url)
        let world = try await MainContext(stack: stack)
        return try await world.fetchCount(Pet.self)
    }

    static func remove(_ url: URL) {
        for suffix in ["", "-wal", "-shm"] { try? FileManager.default.removeItem(atPath: url.path + suffix) }
    }
}
