package millpond.spark;

import io.delta.storage.S3SingleDriverLogStore;
import io.delta.storage.internal.PathLock;
import java.io.FileNotFoundException;
import java.io.IOException;
import java.io.InputStream;
import java.io.InterruptedIOException;
import java.net.URI;
import java.net.URISyntaxException;
import java.nio.charset.StandardCharsets;
import java.nio.file.FileAlreadyExistsException;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.Iterator;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FSDataOutputStream;
import org.apache.hadoop.fs.FSDataOutputStreamBuilder;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;

/**
 * Delta's log store for an s3a:// (or s3://) lake whose commits the store itself decides: a commit file is created
 * with {@code If-None-Match: *}, so of two writers of one version exactly one gets it.
 *
 * <p>Why: delta-storage's {@link S3SingleDriverLogStore} checks that {@code _delta_log/N.json} does not exist and
 * then PUTs it; it is atomic only among the writers of one JVM (its path lock). A writer elsewhere that PUTs the same
 * version between the check and the PUT is silently overwritten: its commit is lost although it was told it
 * succeeded. Here the PUT itself is conditional (hadoop-aws 3.5's {@code fs.option.create.conditional.overwrite}),
 * and the loser gets {@link FileAlreadyExistsException}, which Delta's transaction takes for a concurrent commit: it
 * checks for conflicts and retries at the next version, above the winner.
 *
 * <p>A failed upload is settled by reading the object back. If it holds exactly the bytes this write sent, the
 * write landed (the store's answer was lost and the AWS SDK's retry of the same PUT was refused with 412 because the
 * first attempt had created the object), so the commit stands. Another writer's bytes mean the version is taken;
 * no object means the upload failed, and its error is raised as it was.
 *
 * <p>Writes that may overwrite ({@code _last_checkpoint}), reads and listings are the parent's. The parent's path
 * lock is private, so conditional writes serialize on a lock of their own: within one JVM they still wait for each
 * other instead of racing to the store.
 */
public class ConditionalS3LogStore extends S3SingleDriverLogStore {
  /** The create option hadoop-aws 3.5 sends as {@code If-None-Match: *} (Hadoop's Options.OpenFileOptions). */
  static final String CONDITIONAL_CREATE = "fs.option.create.conditional.overwrite";

  private static final PathLock PATH_LOCK = new PathLock();

  public ConditionalS3LogStore(Configuration hadoopConf) {
    super(hadoopConf);
  }

  @Override
  public void write(Path path, Iterator<String> actions, Boolean overwrite, Configuration hadoopConf)
      throws IOException {
    if (overwrite) {
      super.write(path, actions, true, hadoopConf);
      return;
    }
    FileSystem fs = path.getFileSystem(hadoopConf);
    Path resolved = withoutUserInfo(fs.makeQualified(path));
    try {
      PATH_LOCK.acquire(resolved);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new InterruptedIOException(e.getMessage());
    }
    try {
      if (fs.exists(resolved)) {
        throw new FileAlreadyExistsException(resolved.toUri().toString());
      }
      createOnce(fs, resolved, actions);
    } finally {
      PATH_LOCK.release(resolved);
    }
  }

  private static void createOnce(FileSystem fs, Path path, Iterator<String> actions) throws IOException {
    MessageDigest sent = sha256();
    long length = 0;
    FSDataOutputStream out;
    try {
      FSDataOutputStreamBuilder<?, ?> builder = fs.createFile(path);
      builder.overwrite(false);
      builder.must(CONDITIONAL_CREATE, true);
      out = builder.build();
    } catch (org.apache.hadoop.fs.FileAlreadyExistsException e) {
      throw alreadyThere(path, e);
    }
    try {
      while (actions.hasNext()) {
        byte[] line = (actions.next() + "\n").getBytes(StandardCharsets.UTF_8);
        out.write(line);
        sent.update(line);
        length += line.length;
      }
    } catch (IOException | RuntimeException | Error e) {
      try {
        out.abort(); // a partial commit must never be uploaded: close() would PUT what was buffered
      } catch (RuntimeException abortFailed) {
        e.addSuppressed(abortFailed);
      }
      throw e;
    }
    try {
      out.close();
    } catch (IOException failed) {
      settle(fs, path, sent.digest(), length, failed);
    }
  }

  /** After a failed upload: returns if the object holds exactly what was sent, else raises. */
  private static void settle(FileSystem fs, Path path, byte[] sentDigest, long sentLength, IOException failed)
      throws IOException {
    MessageDigest found = sha256();
    long foundLength = 0;
    byte[] buffer = new byte[64 * 1024];
    try (InputStream in = fs.open(path)) {
      for (int n = in.read(buffer); n >= 0; n = in.read(buffer)) {
        found.update(buffer, 0, n);
        foundLength += n;
      }
    } catch (FileNotFoundException absent) {
      throw failed; // nothing landed: the upload's own error
    } catch (IOException unreadable) {
      failed.addSuppressed(unreadable);
      throw failed;
    }
    if (foundLength == sentLength && MessageDigest.isEqual(found.digest(), sentDigest)) {
      return; // this write's PUT landed; the error answered a retry of it
    }
    throw alreadyThere(path, failed);
  }

  private static FileAlreadyExistsException alreadyThere(Path path, Exception cause) {
    FileAlreadyExistsException taken =
        new FileAlreadyExistsException(path.toUri().toString(), null, "another writer created it first");
    taken.initCause(cause);
    return taken;
  }

  private static MessageDigest sha256() {
    try {
      return MessageDigest.getInstance("SHA-256");
    } catch (NoSuchAlgorithmException e) {
      throw new IllegalStateException("every JVM has SHA-256", e);
    }
  }

  /** As the parent's resolvePath (private): the path's identity for the lock carries no credentials. */
  private static Path withoutUserInfo(Path path) {
    URI uri = path.toUri();
    try {
      return new Path(new URI(uri.getScheme(), null, uri.getHost(), uri.getPort(), uri.getPath(), uri.getQuery(),
          uri.getFragment()));
    } catch (URISyntaxException e) {
      throw new IllegalArgumentException(e);
    }
  }
}
