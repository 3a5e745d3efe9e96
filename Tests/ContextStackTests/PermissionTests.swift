@testable import ContextStack
import _ContextStackCore
@testable import _ContextStackModel
import _ContextStackSQLite
@testable import _ContextStackSQLiteStore
import Foundation
import Testing

/// Files and directories the process may not write: adding the store throws
/// `StoreError.permissionDenied` and changes nothing.
///
/// Root ignores file permissions, and CI runs as root: there the `stress-writer` child runs as
/// the unprivileged user `nobody` (through util-linux's `setpriv`), so these tests run
/// everywhere. As another user the child runs as that user.
@Suite struct PermissionTests {
    /// `nobody`, whom root runs the child as.
    static let unprivileged: (uid: UInt32, gid: UInt32) = (65_534, 65_534)
    static var runsAsRoot: Bool { geteuid() == 0 }

    let directory: URL
    let url: URL

    init() throws {
        (directory, url) = try makeStoreLocation()
    }

    func cleanUp() { removeTemporaryDirectory(directory) }

    /// Gives `path` to the user the child runs as, with `permissions`.
    func prepare(_ path: String, permissions: Int) throws {
        var attributes: [FileAttributeKey: Any] = [.posixPermissions: permissions]
        if Self.runsAsRoot {
            attributes[.ownerAccountID] = Self.unprivileged.uid
            attributes[.groupOwnerAccountID] = Self.unprivileged.gid
        }
        try FileManager.default.setAttributes(attributes, ofItemAtPath: path)
    }

    /// A store the child's model opens, written by this process, then handed over.
    func writeStore(permissions: Int) throws {
        try ContextStackTests.writeStore([CrashEntry.self, CrashTally.self], at: url) { update in
            try update.create(CrashEntry.self).batch = 7
        }
        try prepare(directory.path, permissions: 0o755)
        try prepare(url.path, permissions: permissions)
    }

    /// Runs `stress-writer permissions` on the store and returns the lines it printed.
    func runChild() throws -> [String] {
        let child = try StressWriterProcess(["permissions", url.path], asUser: Self.runsAsRoot ? Self.unprivileged : nil, timeLimit: 60)
        let lines = child.remainingLines()
        child.process.waitUntilExit()
        #expect(child.exitedCleanly, "\(child.errorText)")
        return lines
    }

    /// The control: with permissions to read and write, the same child opens and commits, so
    /// the refusals below come from the permissions and nothing else.
    @Test func aWritableStoreOpensAndCommits() throws {
        defer { cleanUp() }
        try writeStore(permissions: 0o644)
        #expect(try runChild() == ["add: ok", "commit: ok"])
    }

    /// A read-only file is refused when it is added, not at the first commit.
    @Test func aReadOnlyFileIsRefusedWhenAdded() throws {
        defer { cleanUp() }
        try writeStore(permissions: 0o444)
        let before = FileManager.default.contents(atPath: url.path)
        #expect(try runChild() == ["add: permissionDenied"])
        #expect(FileManager.default.contents(atPath: url.path) == before)
    }

    @Test func aFileWithoutPermissionIsRefused() throws {
        defer { cleanUp() }
        try writeStore(permissions: 0o000)
        #expect(try runChild() == ["add: permissionDenied"])
    }

    /// A writable store in a directory the process may not write is refused too (SQLite must
    /// create its `-wal` and `-shm` there), and left as it was.
    @Test func aStoreInAReadOnlyDirectoryIsRefused() throws {
        defer { cleanUp() }
        try writeStore(permissions: 0o644)
        // The write-ahead log goes when the last connection closes, which may be on another
        // thread; a bound, not a measure.
        for _ in 0..<1000 where FileManager.default.fileExists(atPath: url.path + "-wal") { usleep(10_000) }
        try prepare(directory.path, permissions: 0o555)
        let before = FileManager.default.contents(atPath: url.path)
        #expect(try FileManager.default.contentsOfDirectory(atPath: directory.path) == [url.lastPathComponent])
        #expect(try runChild() == ["add: permissionDenied"])
        #expect(FileManager.default.contents(atPath: url.path) == before)
    }

    /// A store needs `-wal` and `-shm` beside its file: a read-only directory is refused, and
    /// no file is created in it.
    @Test func aReadOnlyDirectoryIsRefused() throws {
        defer { cleanUp() }
        try prepare(directory.path, permissions: 0o555)
        #expect(try runChild() == ["add: permissionDenied"])
        #expect(!FileManager.default.fileExists(atPath: url.path))
    }
}
