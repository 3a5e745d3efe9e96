import Foundation
import Testing

/// The demo, run as the README says, on SQLite and — with `--store postgres://…` — on a
/// PostgreSQL database: it runs to the end and says where the store is.
@Suite struct DemoTests {
    /// The demo's output, once it exited; throws if it failed.
    static func run(_ arguments: [String]) throws -> String {
        let demo = try stressWriter().deletingLastPathComponent().appendingPathComponent("demo")
        let process = try ChildProcess([demo.path] + arguments, errors: .output)
        let text = String(decoding: process.output?.readDataToEndOfFile() ?? Data(), as: UTF8.self)
        let status = process.waitUntilExit()
        // The demo leaves its SQLite files for a look afterwards, in the directory it made.
        if let line = text.split(separator: "\n").first(where: { $0.hasPrefix(Self.storeAt) }) {
            let directory = URL(fileURLWithPath: String(line.dropFirst(Self.storeAt.count))).deletingLastPathComponent()
            if directory.lastPathComponent.hasPrefix("contextstack-demo-") { removeTemporaryDirectory(directory) }
        }
        guard status == 0 else { throw ChildProcessError(message: "demo failed: \(text)") }
        return text
    }
    static let storeAt = "ContextStack demo — store at "

    @Test func theDemoRunsOnSQLite() throws {
        let output = try Self.run([])
        #expect(output.contains("Finally, in SQLite and the main context:"))
        #expect(output.contains("Serial: 4 tasks × 25 increments → 100."))
    }

    @Test(.enabled(if: PostgresServer.isAvailable, "needs a PostgreSQL server"))
    func theDemoRunsOnPostgreSQL() throws {
        let schema = try TestSchema()
        defer { schema.drop() }
        let output = try Self.run(["--store", schema.url.absoluteString])
        #expect(output.contains("ContextStack demo — store in PostgreSQL"))
        #expect(output.contains("Finally, in PostgreSQL and the main context:"))
        #expect(output.contains("Serial: 4 tasks × 25 increments → 100."))
        #expect(!output.contains("background error"))
    }
}
