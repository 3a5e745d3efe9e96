@testable import ContextStack
import Foundation
import Testing
#if canImport(Glibc)
import Glibc
#endif

@Suite struct TerminationTests {
    /// Where the child process of the exit test writes: derived from the parent's PID, so both
    /// sides find it without sharing state.
    static func storeURL(parent: pid_t) -> URL {
        FileManager.default.temporaryDirectory.appendingPathComponent("ContextStackTests-termination-\(parent).sqlite")
    }

    @Test @MainActor func sigtermRightAfterAThreeTierCommitKeepsTheCommit() async throws {
        let url = Self.storeURL(parent: getpid())
        defer {
            for suffix in ["", "-wal", "-shm"] { try? FileManager.default.removeItem(atPath: url.path + suffix) }
        }
        await #expect(processExitsWith: .signal(SIGTERM)) {
            try await MainActor.run {
                let stack = try Stack(model: Model(Person.self, Pet.self))
                try stack.addDatabaseStore(at: TerminationTests.storeURL(parent: getppid()))
                stack.flushesOnTermination = true
                let world = try MainContext(stack: stack)
                try world.beginUpdateAndWait { update in
                    for index in 0..<20_000 { try update.create(Pet.self).age = index }
                    try update.commit()
                }
                // No flush: 20,000 rows take the root a while to write, so the signal arrives first.
                kill(getpid(), SIGTERM)
                while true { sleep(1) }
            }
        }
        let stack = try Stack(model: Model(Person.self, Pet.self))
        try stack.addDatabaseStore(at: url)
        let world = try MainContext(stack: stack)
        #expect(try world.fetchCount(Pet.self) == 20_000)
    }
}
