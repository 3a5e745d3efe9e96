@testable import ContextStack
import _ContextStackCore
@testable import _ContextStackModel
import _ContextStackSQLite
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
        defer {
            for suffix in ["", "-wal", "-shm"] { try? FileManager.default.removeItem(atPath: url.path + suffix) }
        }
        await #expect(processExitsWith: .signal(signal)) { [signal, flushes] in
            alarm(60)
            try await MainActor.run {
                let stack = try Stack(model: Model(Person.self, Pet.self))
                try stack.addDatabaseStore(at: TerminationTests.storeURL(parent: getppid(), signal: signal, flushes: flushes))
                if flushes { stack.flushesOnTermination = true }
                let world = try MainContext(stack: stack)
                try world.beginUpdateAndWait { update in
                    for index in 0..<20_000 { try update.create(Pet.self).age = index }
                    // Hold the writer's connection for half a second from before the commit on.
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
                kill(getpid(), signal)
                while true { sleep(1) }
            }
        }
        let stack = try Stack(model: Model(Person.self, Pet.self))
        try stack.addDatabaseStore(at: url)
        let world = try await MainContext(stack: stack)
        #expect(try await world.fetchCount(Pet.self) == (flushes ? 20_000 : 0))
    }
}
