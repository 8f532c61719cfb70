package dev.amphora.compat;

import static org.junit.jupiter.api.Assertions.assertEquals;

import com.datastax.oss.driver.api.core.session.Session;
import org.junit.jupiter.api.Test;

/**
 * Needs no server: install.sh runs it online once so that Maven fetches the surefire
 * JUnit provider, which later offline runs (run.sh uses mvn -o) cannot download.
 */
class DriverInstalledTest {
  @Test
  void driverVersionIsThePinnedOne() {
    assertEquals(System.getProperty("compat.driver.version"),
        Session.OSS_DRIVER_COORDINATES.getVersion().toString());
  }
}
