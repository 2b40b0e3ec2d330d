import org.javatuples.Pair;

// Sandbox Fusion puts javatuples-1.2.jar on every Java program's classpath.
public class Main {
    public static void main(String[] args) {
        Pair<String, Integer> pair = Pair.with("hello", 1);
        System.out.println(pair.getValue0());
    }
}
