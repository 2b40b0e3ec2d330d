class Hello {
    static void Main() {
        System.Console.WriteLine("hello");
    }
}
