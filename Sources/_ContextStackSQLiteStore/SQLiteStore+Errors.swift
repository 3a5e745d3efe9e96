import Foundation
import _ContextStackCore
import _ContextStackModel
import _ContextStackSQLite

extension SQLiteStore {
    /// A unique index that SQLite found violated while writing — by a row another process
    /// saved after this commit was checked — as the `SaveError` the check would have thrown.
    package func saveError(_ error: any Error) -> any Error {
        guard let error = error as? SQLiteError, error.code.primary == .constraint,
              let range = error.message.range(of: "UNIQUE constraint failed: ") else { return error }
        // "UNIQUE constraint failed: Person.first, Person.last"
        let columns = error.message[range.upperBound...].split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }
        let table = columns.first?.split(separator: ".").first.map(String.init)
        let keys = columns.compactMap { $0.split(separator: ".").last.map(String.init) }
        let constraint = graph.tables.first { $0.name == table }?.uniqueConstraints.first { $0.keys == keys }
        return SaveError(.uniquenessViolated,
                         "Cannot save a commit: \(constraint?.label ?? error.message) is unique, and another writer of the store saved the same values first. Nothing of this commit was saved.",
                         entityName: constraint?.entity.name ?? table, keys: keys)
    }
}
