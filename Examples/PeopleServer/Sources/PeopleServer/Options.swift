import Foundation

/// The command line: `PeopleServer [--host 127.0.0.1] [--port 8080] [--store FILE | postgres://…] [--name A]`.
struct Options {
    var host = "127.0.0.1"
    var port = 8080
    /// An SQLite file, or a PostgreSQL URL.
    var store = "people.sqlite"
    /// Recorded as the author of this server's commits, and shown in the live stream.
    var name = "server"

    static func parse(_ arguments: [String]) -> Options {
        var options = Options()
        var rest = arguments.dropFirst()
        while let flag = rest.popFirst() {
            guard let value = rest.popFirst() else { usage("\(flag) needs a value") }
            switch flag {
            case "--host": options.host = value
            case "--port":
                guard let port = Int(value) else { usage("--port takes a number, not '\(value)'") }
                options.port = port
            case "--store": options.store = value
            case "--name": options.name = value
            default: usage("unknown option \(flag)")
            }
        }
        return options
    }

    var postgresURL: URL? {
        store.hasPrefix("postgres://") || store.hasPrefix("postgresql://") ? URL(string: store) : nil
    }

    static func usage(_ problem: String) -> Never {
        FileHandle.standardError.write(Data("""
            PeopleServer: \(problem)
            usage: PeopleServer [--host 127.0.0.1] [--port 8080] [--store people.sqlite | postgres://user@host/db] [--name A]

            """.utf8))
        exit(2)
    }
}
