// Interop drives Apache Curator's recipes for zkdriver's interop test
// (curator_test.go), one command a line on stdin, one answer a line on
// stdout:
//
//	acquire ID KIND PATH [N]   take a hold in a thread of its own; "held ID" once held
//	try ID KIND PATH [N]       one attempt without waiting: "held ID" or "busy ID"
//	release ID                 give hold ID up: "released ID"
//
// KIND is write or read (InterProcessReadWriteLock), mutex
// (InterProcessMutex) or lease (InterProcessSemaphoreV2 of N leases). The
// first argument is the connect string; "ready" says the session is up.
// Errors end the program with a message on stderr.
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;

import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.locks.InterProcessLock;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.framework.recipes.locks.InterProcessReadWriteLock;
import org.apache.curator.framework.recipes.locks.InterProcessSemaphoreV2;
import org.apache.curator.framework.recipes.locks.Lease;
import org.apache.curator.retry.RetryOneTime;

public class Interop {
    interface Hold { void release() throws Exception; }

    // Each hold lives in a thread of its own, which takes it, waits for its
    // release command and releases it: Curator's locks must be released by the
    // thread that took them.
    static final Map<String, CountDownLatch> releases = new ConcurrentHashMap<>();
    static CuratorFramework client;

    static synchronized void say(String s) {
        System.out.println(s);
        System.out.flush();
    }

    static void fail(Exception e) {
        e.printStackTrace();
        System.exit(2);
    }

    // take returns the hold, or null when wait is false and it is taken.
    static Hold take(String kind, String path, int n, boolean wait) throws Exception {
        if (kind.equals("lease")) {
            InterProcessSemaphoreV2 s = new InterProcessSemaphoreV2(client, path, n);
            Lease l = wait ? s.acquire() : s.acquire(0, TimeUnit.MILLISECONDS);
            return l == null ? null : l::close;
        }
        InterProcessLock lock;
        switch (kind) {
            case "write": lock = new InterProcessReadWriteLock(client, path).writeLock(); break;
            case "read": lock = new InterProcessReadWriteLock(client, path).readLock(); break;
            case "mutex": lock = new InterProcessMutex(client, path); break;
            default: throw new IllegalArgumentException("kind " + kind);
        }
        if (wait) {
            lock.acquire();
        } else if (!lock.acquire(0, TimeUnit.MILLISECONDS)) {
            return null;
        }
        return lock::release;
    }

    static void start(String id, String kind, String path, int n, boolean wait) {
        CountDownLatch release = new CountDownLatch(1);
        releases.put(id, release);
        Thread t = new Thread(() -> {
            try {
                Hold h = take(kind, path, n, wait);
                if (h == null) {
                    releases.remove(id);
                    say("busy " + id);
                    return;
                }
                say("held " + id);
                release.await();
                h.release();
                say("released " + id);
            } catch (Exception e) {
                fail(e);
            }
        });
        t.setDaemon(true);
        t.start();
    }

    public static void main(String[] args) throws Exception {
        client = CuratorFrameworkFactory.newClient(args[0], 10000, 10000, new RetryOneTime(100));
        client.start();
        if (!client.blockUntilConnected(30, TimeUnit.SECONDS)) {
            throw new IllegalStateException("no ZooKeeper session within 30s");
        }
        say("ready");
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
        for (String line; (line = in.readLine()) != null; ) {
            String[] f = line.trim().split(" ");
            switch (f[0]) {
                case "acquire":
                case "try":
                    start(f[1], f[2], f[3], f.length > 4 ? Integer.parseInt(f[4]) : 0, f[0].equals("acquire"));
                    break;
                case "release":
                    releases.remove(f[1]).countDown();
                    break;
                default:
                    throw new IllegalArgumentException(line);
            }
        }
        client.close();
    }
}
