package millpond.spark;

import java.util.function.Supplier;
import org.apache.spark.TaskContext;

/**
 * A value built once per Spark task and per call site's literal arguments, on the calling thread.
 *
 * <p>Why per task: what a parser does depends on the session's SQL settings (spark.sql.legacy.timeParserPolicy,
 * ANSI mode, ...), which Spark hands each task through its TaskContext. One JVM serves tasks of several sessions
 * (a Connect server, a notebook, tests), so a value cached on the arguments alone would carry one session's settings
 * into another's query. A task never changes its settings, and a plan's literal arguments are the same objects for
 * every row, so one identity check per row finds the value. Outside a task (a local relation evaluated on the
 * driver) nothing is cached.
 */
final class PerTask<V> {
  private final ThreadLocal<Entry<V>> last = new ThreadLocal<>();

  private record Entry<V>(TaskContext task, Object first, Object second, V value) {}

  V get(Object first, Object second, Supplier<V> build) {
    TaskContext task = TaskContext.get();
    Entry<V> entry = last.get();
    if (task != null && entry != null && entry.task() == task && entry.first() == first
        && entry.second() == second) {
      return entry.value();
    }
    V value = build.get();
    last.set(task == null ? null : new Entry<>(task, first, second, value));
    return value;
  }
}
