import java.io.*;
import java.nio.charset.StandardCharsets;
import org.apache.cassandra.config.DatabaseDescriptor;
import org.apache.cassandra.cql3.QueryProcessor;
import org.apache.cassandra.exceptions.SyntaxException;

public class CqlOracle {
    public static void main(String[] args) throws Exception {
        DatabaseDescriptor.clientInitialization();
        byte[] all = System.in.readAllBytes();
        String in = new String(all, StandardCharsets.UTF_8);
        PrintStream out = new PrintStream(System.out, true, "UTF-8");
        for (String q : in.split("\0", -1)) {
            if (q.isEmpty()) continue;
            String res;
            try {
                QueryProcessor.parseStatement(q);
                res = "OK";
            } catch (SyntaxException e) {
                res = "SYNTAX " + e.getMessage();
            } catch (Throwable e) {
                res = "OTHER " + e.getClass().getSimpleName() + ": " + e.getMessage();
            }
            out.print("@@ " + res.replace("\n", "\\n") + "\n");
        }
    }
}
