# matplotlib draws headless (Agg) into a PNG, as a plotting answer's checker reads it.
import io

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

plt.plot([1, 2, 3], [2, 3, 5])
buffer = io.BytesIO()
plt.savefig(buffer, format="png")
print("hello" if buffer.getvalue().startswith(b"\x89PNG") else "no PNG")
